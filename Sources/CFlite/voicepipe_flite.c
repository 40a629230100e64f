/* CMU Flite, loaded at first use, behind the library's own declarations (voicepipe_flite.h).
 *
 * libflite is opened with dlopen the first time a flite function is called, and each voice's library
 * (libflite_cmu_us_slt.so.1, ...) the first time its register_cmu_us_* function is called, instead
 * of linking all of them: a run that speaks with one voice loads that voice only, and a run that does
 * not use flite loads none of it. A voice's library brings the ones it needs (libflite_usenglish,
 * libflite_cmulex, libflite itself) through its DT_NEEDED entries; libflite is the copy already
 * loaded, so flite's global state is shared by all voices. Each function voicepipe calls is defined
 * below with its real name and prototype and forwards to the library's function, found with dlsym
 * once. When a library is missing, each function fails the way the API reports failure (NULL, a
 * negative number) or does nothing.
 *
 * The definitions are hidden (VP_LOCAL): they serve voicepipe's own code only. Were they exported
 * from the executable, the voices' own calls into libflite would come through them. */
#include "voicepipe_flite.h"
#include "vp_library.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Hidden visibility: the definitions are seen by the rest of the binary they are linked into, and by no
 * shared library (only the definitions: the headers' declarations, libc's included, stay as they are). */
#define VP_LOCAL __attribute__((visibility("hidden")))

/* The sonames (the libraries' ABI version); overridable to test the missing-library path. */
#ifndef VP_FLITE_SONAME
#define VP_FLITE_SONAME "libflite.so.1"
#endif
#ifndef VP_FLITE_VOICE_SONAME
#define VP_FLITE_VOICE_SONAME(voice) "libflite_cmu_us_" voice ".so.1"
#endif
#define VP_FLITE_PACKAGE "libflite1"

/* ---- libflite ---- */

/* flite.h declares flite_init without a prototype; this definition gives it one (no arguments). */
int flite_init(void);

static __typeof__(delete_wave) *p_delete_wave;
static __typeof__(flite_feat_set_float) *p_flite_feat_set_float;
static __typeof__(flite_init) *p_flite_init;
static __typeof__(flite_text_to_wave) *p_flite_text_to_wave;

static int flite_loaded;
static char flite_problem[512];

static void load_flite(void) {
    void *flite = vp_library_open("flite", VP_FLITE_SONAME, VP_FLITE_PACKAGE, flite_problem, sizeof flite_problem);
    int ok = flite != NULL;
    VP_LIBRARY_RESOLVE(ok, flite, delete_wave, "flite", VP_FLITE_SONAME, flite_problem);
    VP_LIBRARY_RESOLVE(ok, flite, flite_feat_set_float, "flite", VP_FLITE_SONAME, flite_problem);
    VP_LIBRARY_RESOLVE(ok, flite, flite_init, "flite", VP_FLITE_SONAME, flite_problem);
    VP_LIBRARY_RESOLVE(ok, flite, flite_text_to_wave, "flite", VP_FLITE_SONAME, flite_problem);
    flite_loaded = ok;
}

/* 1 once libflite is loaded (the first call loads it), 0 when it cannot be. */
static int flite_ready(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_flite);
    return flite_loaded;
}

int vp_flite_load(char *why, size_t size) { return vp_library_status(flite_ready(), flite_problem, why, size); }

VP_LOCAL int flite_init(void) {
    if (!flite_ready()) return -1;
    return p_flite_init();
}

VP_LOCAL cst_wave *flite_text_to_wave(const char *text, cst_voice *voice) {
    if (!flite_ready()) return NULL;
    return p_flite_text_to_wave(text, voice);
}

VP_LOCAL void flite_feat_set_float(cst_features *f, const char *name, float v) {
    if (flite_ready()) p_flite_feat_set_float(f, name, v);
}

VP_LOCAL void delete_wave(cst_wave *val) {
    if (flite_ready()) p_delete_wave(val);
}

/* ---- the voices, one library each ---- */

typedef cst_voice *register_fn(const char *voxdir);

struct voice_library {
    const char *name;           /* "slt" */
    const char *soname;         /* "libflite_cmu_us_slt.so.1" */
    const char *symbol;         /* "register_cmu_us_slt" */
    pthread_once_t once;
    register_fn *reg;           /* set once the library is loaded */
    char problem[512];
};

static struct voice_library voices[] = {
    { "slt", VP_FLITE_VOICE_SONAME("slt"), "register_cmu_us_slt", PTHREAD_ONCE_INIT, NULL, "" },
    { "kal", VP_FLITE_VOICE_SONAME("kal"), "register_cmu_us_kal", PTHREAD_ONCE_INIT, NULL, "" },
    { "kal16", VP_FLITE_VOICE_SONAME("kal16"), "register_cmu_us_kal16", PTHREAD_ONCE_INIT, NULL, "" },
    { "rms", VP_FLITE_VOICE_SONAME("rms"), "register_cmu_us_rms", PTHREAD_ONCE_INIT, NULL, "" },
    { "awb", VP_FLITE_VOICE_SONAME("awb"), "register_cmu_us_awb", PTHREAD_ONCE_INIT, NULL, "" },
};
enum { VOICE_SLT, VOICE_KAL, VOICE_KAL16, VOICE_RMS, VOICE_AWB, VOICE_COUNT };

static void load_voice(struct voice_library *v) {
    if (!flite_ready()) {
        snprintf(v->problem, sizeof v->problem, "%s", flite_problem);
        return;
    }
    void *h = vp_library_open("flite", v->soname, VP_FLITE_PACKAGE, v->problem, sizeof v->problem);
    void *reg = NULL;
    if (vp_library_resolve(h != NULL, h, v->symbol, &reg, "flite", v->soname, v->problem, sizeof v->problem)) v->reg = (register_fn *)reg;
}

/* pthread_once takes a function without arguments: one per voice. */
static void load_slt(void) { load_voice(&voices[VOICE_SLT]); }
static void load_kal(void) { load_voice(&voices[VOICE_KAL]); }
static void load_kal16(void) { load_voice(&voices[VOICE_KAL16]); }
static void load_rms(void) { load_voice(&voices[VOICE_RMS]); }
static void load_awb(void) { load_voice(&voices[VOICE_AWB]); }
static void (*const voice_loaders[VOICE_COUNT])(void) = { load_slt, load_kal, load_kal16, load_rms, load_awb };

/* The voice's register function once its library is loaded (the first call loads it), NULL when it cannot be. */
static register_fn *voice_ready(int i) {
    pthread_once(&voices[i].once, voice_loaders[i]);
    return voices[i].reg;
}

int vp_flite_voice_load(const char *name, char *why, size_t size) {
    for (int i = 0; i < VOICE_COUNT; i++) {
        if (!name || strcmp(name, voices[i].name) != 0) continue;
        if (voice_ready(i)) return 1;
        if (why && size) snprintf(why, size, "%s", voices[i].problem);
        return 0;
    }
    if (why && size) snprintf(why, size, "flite has no voice '%s' in voicepipe (slt, kal, kal16, rms, awb)", name ? name : "");
    return 0;
}

static cst_voice *register_voice(int i, const char *voxdir) {
    register_fn *reg = voice_ready(i);
    return reg ? reg(voxdir) : NULL;
}

VP_LOCAL cst_voice *register_cmu_us_slt(const char *voxdir) { return register_voice(VOICE_SLT, voxdir); }
VP_LOCAL cst_voice *register_cmu_us_kal(const char *voxdir) { return register_voice(VOICE_KAL, voxdir); }
VP_LOCAL cst_voice *register_cmu_us_kal16(const char *voxdir) { return register_voice(VOICE_KAL16, voxdir); }
VP_LOCAL cst_voice *register_cmu_us_rms(const char *voxdir) { return register_voice(VOICE_RMS, voxdir); }
VP_LOCAL cst_voice *register_cmu_us_awb(const char *voxdir) { return register_voice(VOICE_AWB, voxdir); }
