#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "voicepipe_ort.h"

const OrtApiBase *vp_ort_load(const char *path, char *error, size_t error_size) {
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        snprintf(error, error_size, "%s", why ? why : "dlopen failed");
        return NULL;
    }
    const OrtApiBase *(*get)(void) = (const OrtApiBase *(*)(void))dlsym(handle, "OrtGetApiBase");
    if (!get) {
        snprintf(error, error_size, "%s has no OrtGetApiBase: not an ONNX Runtime library", path);
        return NULL;
    }
    const OrtApiBase *base = get();
    if (!base) snprintf(error, error_size, "OrtGetApiBase returned nothing");
    return base;
}
