/* voicepipe_flite.h: CMU Flite and the US English voices voicepipe offers. The declarations are the
 * library's own header; the functions voicepipe calls are defined in voicepipe_flite.c, which opens
 * libflite at first use (dlopen) instead of linking it, and each voice's library at the voice's
 * first registration. */
#pragma once
#include <stddef.h>
#include <flite/flite.h>

/// flite's voices, one library each (libflite_cmu_us_*.so.1). Each returns the same voice on every call,
/// or NULL when the voice's library cannot be loaded (vp_flite_voice_load says why).
/// The voice libraries export these functions without declaring them in a header.
cst_voice *register_cmu_us_slt(const char *voxdir);
cst_voice *register_cmu_us_kal(const char *voxdir);
cst_voice *register_cmu_us_kal16(const char *voxdir);
cst_voice *register_cmu_us_rms(const char *voxdir);
cst_voice *register_cmu_us_awb(const char *voxdir);

/// Loads flite (libflite.so.1) once per process. Returns 1 when it is there; otherwise 0, with a
/// reason naming the library and the Debian package to install in `why` (when it is not NULL).
/// The flite functions work without calling it first: until the library is loaded, each fails the
/// way the API reports failure (NULL, a negative number) or does nothing.
int vp_flite_load(char *why, size_t size);

/// Loads flite and the library of the voice `name` (slt, kal, kal16, rms, awb) once per process:
/// 1 when both are there, otherwise 0 with the reason in `why`.
int vp_flite_voice_load(const char *name, char *why, size_t size);

/// flite_init is declared without a prototype (`int flite_init();`); this one has one.
static inline int vp_flite_init(void) {
    return flite_init();
}
