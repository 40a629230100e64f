/* voicepipe_whisper.h: whisper.cpp's C API as voicepipe uses it, loaded at run time.
 *
 * libwhisper (from the PyPI pywhispercpp wheel, or any build of whisper.cpp 1.8) is opened with
 * dlopen by vp_whisper_load; building voicepipe never needs it. The structures whisper.cpp passes by
 * value (its context and decoding parameters) are declared in voicepipe_whisper.c for the 1.8 ABI
 * and never cross into Swift: Swift fills a vp_whisper_request and reads results through the
 * accessors below. vp_whisper_load refuses a library of another minor version by name. */
#ifndef VOICEPIPE_WHISPER_H
#define VOICEPIPE_WHISPER_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

typedef struct vp_whisper_model vp_whisper_model;   /* whisper_context: the weights, shared */
typedef struct vp_whisper_state vp_whisper_state;   /* whisper_state: one decoder's buffers */

/* Loads libwhisper from `path` once per process. Returns 0, or -1 with a reason in `error`. */
int vp_whisper_load(const char *path, char *error, size_t error_size);
/* The loaded library's version ("1.8.5"), or "" before loading. */
const char *vp_whisper_version(void);

/* Loads a ggml model file without decoder state (no GPU). NULL with a reason in `error`. */
vp_whisper_model *vp_whisper_model_load(const char *path, char *error, size_t error_size);
void vp_whisper_model_free(vp_whisper_model *model);
int vp_whisper_model_is_multilingual(vp_whisper_model *model);
int vp_whisper_model_n_vocab(vp_whisper_model *model);
int vp_whisper_model_n_text_layer(vp_whisper_model *model);
const char *vp_whisper_model_type(vp_whisper_model *model);
/* A language code's id, or -1 when whisper does not know it (works before any model is loaded). */
int vp_whisper_lang_id(const char *code);
const char *vp_whisper_lang_str(int id);

vp_whisper_state *vp_whisper_state_new(vp_whisper_model *model);
void vp_whisper_state_free(vp_whisper_state *state);

/* One decoding request. */
typedef struct vp_whisper_request {
    int n_threads;
    int beam_size;              /* 1 = greedy */
    bool translate;
    const char *language;       /* a code, or "auto" */
    const char *initial_prompt; /* NULL = none */
    bool token_timestamps;
    bool no_timestamps;
    bool single_segment;
    int max_tokens;             /* per segment, 0 = no limit */
    bool temperature_fallback;  /* retry at higher temperatures when the result looks like a loop */
    /* Polled while decoding: a non-zero value aborts the request (the call returns non-zero). Written
     * with vp_whisper_flag_set and read atomically: another thread sets it while this one decodes. */
    const int *abort_flag;
    int audio_ctx;              /* encoder frames (20 ms each) to run; 0 = the model's whole window (1500) */
} vp_whisper_request;

/* Sets or reads an abort flag atomically (the decoding thread polls it while another sets it). */
void vp_whisper_flag_set(int *flag, int value);
int vp_whisper_flag_get(const int *flag);

/* The loaded library's CPU features as whisper.cpp prints them ("AVX = 1 | AVX2 = 1 | ..."), or "". */
const char *vp_whisper_system_info(void);
/* How many times smaller zlib makes `n` bytes of text (Whisper's compression-ratio test: text a decoder
 * repeats in a loop compresses far better than speech, above about 2.4). 0 for empty text. */
double vp_whisper_compression_ratio(const char *text, size_t n);
/* The model's audio context (encoder frames in its 30 s window: 1500 for every Whisper model). */
int vp_whisper_model_n_audio_ctx(vp_whisper_model *model);

/* Decodes `n` mono 16 kHz samples in [-1, 1]. 0 on success. */
/* Before the process exits: aborts the decodings that are running, waits for them (up to 30 s) and lets
 * no new one start. exit() runs the destructors ggml registered during the first decoding before the handler
 * this file registers at load, so a process that exits while that first decoding runs must call this
 * first. Harmless when Whisper was never loaded. */
void vp_whisper_finish(void);

int vp_whisper_run(vp_whisper_model *model, vp_whisper_state *state, const vp_whisper_request *request,
                   const float *samples, int n, char *error, size_t error_size);

int vp_whisper_n_segments(vp_whisper_state *state);
const char *vp_whisper_segment_text(vp_whisper_state *state, int segment);
int64_t vp_whisper_segment_t0(vp_whisper_state *state, int segment);   /* centiseconds */
int64_t vp_whisper_segment_t1(vp_whisper_state *state, int segment);
float vp_whisper_segment_no_speech(vp_whisper_state *state, int segment);
int vp_whisper_detected_language(vp_whisper_state *state);

/* One decoded token. */
typedef struct vp_whisper_token {
    int id;
    float p;                    /* probability */
    int64_t t0, t1;             /* centiseconds from the start of the audio; -1 when unknown */
    bool special;               /* a control token (timestamps, end of text, ...) */
    const char *text;           /* valid until the state decodes again */
} vp_whisper_token;

int vp_whisper_n_tokens(vp_whisper_state *state, int segment);
vp_whisper_token vp_whisper_get_token(vp_whisper_model *model, vp_whisper_state *state, int segment, int token);

#ifdef __cplusplus
}
#endif
#endif
