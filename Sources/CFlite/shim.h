#pragma once
#include <flite/flite.h>

/// flite's voices, one library each (libflite_cmu_us_*.so). Each returns the same voice on every call.
/// The voice libraries export these functions without declaring them in a header.
cst_voice *register_cmu_us_slt(const char *voxdir);
cst_voice *register_cmu_us_kal(const char *voxdir);
cst_voice *register_cmu_us_kal16(const char *voxdir);
cst_voice *register_cmu_us_rms(const char *voxdir);
cst_voice *register_cmu_us_awb(const char *voxdir);

/// flite_init is declared without a prototype (`int flite_init();`); this one has one.
static inline int vp_flite_init(void) {
    return flite_init();
}
