/* What voicepipe's libraries loaded at first use share (PulseAudio, PocketSphinx, flite, eSpeak NG, FFmpeg):
 * opening a library, looking each function up once, and the one problem text the node reports when either
 * fails, naming the library file and the Debian package to install. */
#ifndef VP_LIBRARY_H
#define VP_LIBRARY_H

#include <stddef.h>

/* Opens `soname` (dlopen, RTLD_NOW | RTLD_LOCAL). When it cannot, writes to `problem` (unless a problem is
 * already there) "<name>'s library <soname> could not be loaded (<dlerror>); install it (Debian: apt-get
 * install <packages>)" and returns NULL. */
__attribute__((visibility("hidden"))) void *vp_library_open(const char *name, const char *soname, const char *packages, char *problem, size_t size);

/* When `ok`, looks `symbol` up in `handle` into `*slot`; returns 1 when found. When not found, writes
 * "<name>'s <soname> has no <symbol> (a different <name> than voicepipe was built with?)" to `problem` and
 * returns 0. Returns 0 at once when `ok` is 0, so that the first failure is the one reported. */
__attribute__((visibility("hidden"))) int vp_library_resolve(int ok, void *handle, const char *symbol, void **slot,
                       const char *name, const char *soname, char *problem, size_t size);

/* The body of each vp_*_load: 1 when `loaded`; else copies `problem` to `why` (when given) and returns 0. */
__attribute__((visibility("hidden"))) int vp_library_status(int loaded, const char *problem, char *why, size_t size);

/* Resolves function `fn` into its pointer `p_fn` (declared `static __typeof__(fn) *p_fn;`). */
#define VP_LIBRARY_RESOLVE(ok, handle, fn, name, soname, problem) \
    ((ok) = vp_library_resolve((ok), (handle), #fn, (void **)&p_##fn, (name), (soname), (problem), sizeof (problem)))

#endif
