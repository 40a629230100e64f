/* voicepipe_espeak.h: eSpeak NG for voicepipe. The declarations are the library's own header; the
 * functions voicepipe calls are defined in voicepipe_espeak.c, which opens libespeak-ng at first use
 * (dlopen) instead of linking it. */
#pragma once
#include <stddef.h>
#include <espeak-ng/speak_lib.h>

/// Loads eSpeak NG (libespeak-ng.so.1) once per process. Returns 1 when it is there; otherwise 0,
/// with a reason naming the library and the Debian package to install in `why` (when it is not
/// NULL). The espeak_* functions work without calling it first: until the library is loaded, each
/// fails the way the API reports failure (EE_INTERNAL_ERROR, NULL) or does nothing.
int vp_espeak_load(char *why, size_t size);
