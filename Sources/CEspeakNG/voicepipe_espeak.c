/* eSpeak NG, loaded at first use, behind the library's own declarations (voicepipe_espeak.h).
 *
 * libespeak-ng is opened with dlopen the first time an espeak_* function is called, not linked, so a
 * run that does not speak with espeak-ng does not load it (nor libpcaudio and libsonic, which it
 * needs). Each function voicepipe calls is defined below with its real name and prototype (the
 * library's header is included, so the compiler checks them) and forwards to the library's function,
 * found with dlsym once. When the library is missing, each function fails the way the API reports
 * failure (EE_INTERNAL_ERROR, NULL) or does nothing.
 *
 * The definitions are hidden (VP_LOCAL): they serve voicepipe's own code only and stand in for the
 * library in no other shared library. */
#include "voicepipe_espeak.h"
#include "vp_library.h"

#include <pthread.h>
#include <stdio.h>

/* Hidden visibility: the definitions are seen by the rest of the binary they are linked into, and by no
 * shared library (only the definitions: the headers' declarations, libc's included, stay as they are). */
#define VP_LOCAL __attribute__((visibility("hidden")))

/* The soname (the library's ABI version); overridable to test the missing-library path. */
#ifndef VP_ESPEAK_SONAME
#define VP_ESPEAK_SONAME "libespeak-ng.so.1"
#endif
#define VP_ESPEAK_PACKAGE "libespeak-ng1"

static __typeof__(espeak_Initialize) *p_espeak_Initialize;
static __typeof__(espeak_ListVoices) *p_espeak_ListVoices;
static __typeof__(espeak_SetParameter) *p_espeak_SetParameter;
static __typeof__(espeak_SetSynthCallback) *p_espeak_SetSynthCallback;
static __typeof__(espeak_SetVoiceByName) *p_espeak_SetVoiceByName;
static __typeof__(espeak_Synth) *p_espeak_Synth;
static __typeof__(espeak_TextToPhonemes) *p_espeak_TextToPhonemes;

static int espeak_loaded;
static char espeak_problem[512];

static void load_espeak(void) {
    void *h = vp_library_open("eSpeak NG", VP_ESPEAK_SONAME, VP_ESPEAK_PACKAGE " espeak-ng-data", espeak_problem, sizeof espeak_problem);
    int ok = h != NULL;
    VP_LIBRARY_RESOLVE(ok, h, espeak_Initialize, "eSpeak NG", VP_ESPEAK_SONAME, espeak_problem);
    VP_LIBRARY_RESOLVE(ok, h, espeak_ListVoices, "eSpeak NG", VP_ESPEAK_SONAME, espeak_problem);
    VP_LIBRARY_RESOLVE(ok, h, espeak_SetParameter, "eSpeak NG", VP_ESPEAK_SONAME, espeak_problem);
    VP_LIBRARY_RESOLVE(ok, h, espeak_SetSynthCallback, "eSpeak NG", VP_ESPEAK_SONAME, espeak_problem);
    VP_LIBRARY_RESOLVE(ok, h, espeak_SetVoiceByName, "eSpeak NG", VP_ESPEAK_SONAME, espeak_problem);
    VP_LIBRARY_RESOLVE(ok, h, espeak_Synth, "eSpeak NG", VP_ESPEAK_SONAME, espeak_problem);
    VP_LIBRARY_RESOLVE(ok, h, espeak_TextToPhonemes, "eSpeak NG", VP_ESPEAK_SONAME, espeak_problem);
    espeak_loaded = ok;
}

/* 1 once the library is loaded (the first call loads it), 0 when it cannot be. */
static int espeak_ready(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_espeak);
    return espeak_loaded;
}

int vp_espeak_load(char *why, size_t size) { return vp_library_status(espeak_ready(), espeak_problem, why, size); }

VP_LOCAL int espeak_Initialize(espeak_AUDIO_OUTPUT output, int buflength, const char *path, int options) {
    if (!espeak_ready()) return EE_INTERNAL_ERROR;
    return p_espeak_Initialize(output, buflength, path, options);
}

VP_LOCAL void espeak_SetSynthCallback(t_espeak_callback *SynthCallback) {
    if (espeak_ready()) p_espeak_SetSynthCallback(SynthCallback);
}

VP_LOCAL espeak_ERROR espeak_Synth(const void *text, size_t size, unsigned int position, espeak_POSITION_TYPE position_type,
                                   unsigned int end_position, unsigned int flags, unsigned int *unique_identifier, void *user_data) {
    if (!espeak_ready()) return EE_INTERNAL_ERROR;
    return p_espeak_Synth(text, size, position, position_type, end_position, flags, unique_identifier, user_data);
}

VP_LOCAL espeak_ERROR espeak_SetParameter(espeak_PARAMETER parameter, int value, int relative) {
    if (!espeak_ready()) return EE_INTERNAL_ERROR;
    return p_espeak_SetParameter(parameter, value, relative);
}

VP_LOCAL const espeak_VOICE **espeak_ListVoices(espeak_VOICE *voice_spec) {
    if (!espeak_ready()) return NULL;
    return p_espeak_ListVoices(voice_spec);
}

VP_LOCAL espeak_ERROR espeak_SetVoiceByName(const char *name) {
    if (!espeak_ready()) return EE_INTERNAL_ERROR;
    return p_espeak_SetVoiceByName(name);
}

VP_LOCAL const char *espeak_TextToPhonemes(const void **textptr, int textmode, int phonememode) {
    if (!espeak_ready()) {
        if (textptr) *textptr = NULL;
        return NULL;
    }
    return p_espeak_TextToPhonemes(textptr, textmode, phonememode);
}
