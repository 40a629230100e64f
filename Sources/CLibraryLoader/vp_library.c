#include "vp_library.h"

#include <dlfcn.h>
#include <stdio.h>

void *vp_library_open(const char *name, const char *soname, const char *packages, char *problem, size_t size) {
    void *handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!handle && size && !problem[0]) {
        const char *why = dlerror();
        snprintf(problem, size, "%s's library %s could not be loaded (%s); install it (Debian: apt-get install %s)",
                 name, soname, why ? why : "dlopen failed", packages);
    }
    return handle;
}

int vp_library_resolve(int ok, void *handle, const char *symbol, void **slot,
                       const char *name, const char *soname, char *problem, size_t size) {
    if (!ok || !handle) return 0;
    *slot = dlsym(handle, symbol);
    if (*slot) return 1;
    if (size) snprintf(problem, size, "%s's %s has no %s (a different %s than voicepipe was built with?)", name, soname, symbol, name);
    return 0;
}

int vp_library_status(int loaded, const char *problem, char *why, size_t size) {
    if (loaded) return 1;
    if (why && size) snprintf(why, size, "%s", problem);
    return 0;
}
