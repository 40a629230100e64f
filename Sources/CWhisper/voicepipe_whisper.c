/* whisper.cpp 1.8's C ABI, opened with dlopen. The parameter structures below follow whisper.h of
 * that release field for field (their sizes on x86-64 are checked at load against what the library's
 * own default-parameter functions return); voicepipe only reads and writes them here. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "voicepipe_whisper.h"

typedef int32_t wtoken;

struct w_aheads { size_t n_heads; const void *heads; };

struct w_context_params {
    bool use_gpu;
    bool flash_attn;
    int gpu_device;
    bool dtw_token_timestamps;
    int dtw_aheads_preset;
    int dtw_n_top;
    struct w_aheads dtw_aheads;
    size_t dtw_mem_size;
};

struct w_token_data {
    wtoken id, tid;
    float p, plog, pt, ptsum;
    int64_t t0, t1, t_dtw;
    float vlen;
};

struct w_vad_params {
    float threshold;
    int min_speech_duration_ms;
    int min_silence_duration_ms;
    float max_speech_duration_s;
    int speech_pad_ms;
    float samples_overlap;
};

struct w_full_params {
    int strategy;
    int n_threads, n_max_text_ctx, offset_ms, duration_ms;
    bool translate, no_context, no_timestamps, single_segment;
    bool print_special, print_progress, print_realtime, print_timestamps;
    bool token_timestamps;
    float thold_pt, thold_ptsum;
    int max_len;
    bool split_on_word;
    int max_tokens;
    bool debug_mode;
    int audio_ctx;
    bool tdrz_enable;
    const char *suppress_regex;
    const char *initial_prompt;
    bool carry_initial_prompt;
    const wtoken *prompt_tokens;
    int prompt_n_tokens;
    const char *language;
    bool detect_language;
    bool suppress_blank, suppress_nst;
    float temperature, max_initial_ts, length_penalty;
    float temperature_inc, entropy_thold, logprob_thold, no_speech_thold;
    struct { int best_of; } greedy;
    struct { int beam_size; float patience; } beam_search;
    void *new_segment_callback, *new_segment_callback_user_data;
    void *progress_callback, *progress_callback_user_data;
    void *encoder_begin_callback, *encoder_begin_callback_user_data;
    bool (*abort_callback)(void *data);
    void *abort_callback_user_data;
    void *logits_filter_callback, *logits_filter_callback_user_data;
    const void **grammar_rules;
    size_t n_grammar_rules, i_start_rule;
    float grammar_penalty;
    bool vad;
    const char *vad_model_path;
    struct w_vad_params vad_params;
};

static struct {
    void *handle;
    char version[32];
    const char *(*version_fn)(void);
    struct w_context_params *(*context_default_params_by_ref)(void);
    void (*free_context_params)(struct w_context_params *);
    void *(*init_no_state)(const char *, struct w_context_params);
    void (*free_ctx)(void *);
    void *(*init_state)(void *);
    void (*free_state)(void *);
    struct w_full_params *(*full_default_params_by_ref)(int);
    void (*free_params)(struct w_full_params *);
    int (*full_with_state)(void *, void *, struct w_full_params, const float *, int);
    int (*n_segments)(void *);
    const char *(*segment_text)(void *, int);
    int64_t (*segment_t0)(void *, int);
    int64_t (*segment_t1)(void *, int);
    float (*segment_no_speech)(void *, int);
    int (*n_tokens)(void *, int);
    struct w_token_data (*token_data)(void *, int, int);
    const char *(*token_text)(void *, void *, int, int);
    int (*token_eot)(void *);
    int (*lang_id)(const char *);
    const char *(*lang_str)(int);
    int (*full_lang_id)(void *);
    int (*is_multilingual)(void *);
    int (*n_vocab)(void *);
    int (*n_text_layer)(void *);
    const char *(*model_type)(void *);
    void (*log_set)(void (*)(int, const char *, void *), void *);
    const char *(*system_info)(void);
    int (*n_audio_ctx)(void *);
} W;

static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
/* At exit, decodings still running are aborted and waited for (up to 3 s) before the C++ runtime tears
 * down ggml under them; no new one starts. ggml makes some of its objects on first use, which registers
 * their destructors then; exit runs handlers in reverse order, so ours is registered after the first
 * decoding has finished, to run before those. */
static atomic_int shutting_down;
static atomic_int in_flight;
static atomic_int exit_handler_registered;

/* Stops new work and waits up to max_ms for what runs. whisper.cpp polls the abort flag between graph
 * nodes, but an encoder pass it is in (the model's first decoding, 30 s of input whatever the audio) can
 * take seconds to notice on a busy machine. */
static void wait_for_decodings(int max_ms) {
    atomic_store(&shutting_down, 1);
    for (int i = 0; i < max_ms / 10 && atomic_load(&in_flight) > 0; i++) {
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
}

static void finish_decodings(void) { wait_for_decodings(3000); }

/* Called by the program before it exits: waits as long as it takes, up to 30 s (a second signal still
 * exits at once, without exit handlers). */
void vp_whisper_finish(void) { wait_for_decodings(30000); }
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[512];

/* whisper.cpp's log: the first error since the last call is kept for its error message (later ones
 * only say that loading failed), the rest is dropped. */
static void on_log(int level, const char *text, void *user) {
    (void)user;
    if (level != 4 /* GGML_LOG_LEVEL_ERROR */ || !text) return;
    pthread_mutex_lock(&log_lock);
    if (last_error[0]) { pthread_mutex_unlock(&log_lock); return; }
    snprintf(last_error, sizeof last_error, "%s", text);
    size_t n = strlen(last_error);
    while (n > 0 && (last_error[n - 1] == '\n' || last_error[n - 1] == ' ')) last_error[--n] = 0;
    pthread_mutex_unlock(&log_lock);
}

static void take_log(char *error, size_t error_size, const char *what) {
    pthread_mutex_lock(&log_lock);
    if (last_error[0]) snprintf(error, error_size, "%s: %s", what, last_error);
    else snprintf(error, error_size, "%s", what);
    last_error[0] = 0;
    pthread_mutex_unlock(&log_lock);
}

#define SYM(field, name) \
    do { *(void **)&W.field = dlsym(handle, name); \
         if (!W.field) { snprintf(error, error_size, "%s has no %s: not a whisper.cpp 1.8 library", path, name); goto fail; } } while (0)

int vp_whisper_load(const char *path, char *error, size_t error_size) {
    pthread_mutex_lock(&load_lock);
    if (W.handle) { pthread_mutex_unlock(&load_lock); return 0; }
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        snprintf(error, error_size, "%s", why ? why : "dlopen failed");
        pthread_mutex_unlock(&load_lock);
        return -1;
    }
    SYM(version_fn, "whisper_version");
    const char *version = W.version_fn();
    if (!version || strncmp(version, "1.8.", 4) != 0) {
        snprintf(error, error_size, "%s is whisper.cpp %s; voicepipe needs 1.8.x (scripts/install-whisper.sh installs it)",
                 path, version ? version : "(unknown)");
        goto fail;
    }
    SYM(context_default_params_by_ref, "whisper_context_default_params_by_ref");
    SYM(free_context_params, "whisper_free_context_params");
    SYM(init_no_state, "whisper_init_from_file_with_params_no_state");
    SYM(free_ctx, "whisper_free");
    SYM(init_state, "whisper_init_state");
    SYM(free_state, "whisper_free_state");
    SYM(full_default_params_by_ref, "whisper_full_default_params_by_ref");
    SYM(free_params, "whisper_free_params");
    SYM(full_with_state, "whisper_full_with_state");
    SYM(n_segments, "whisper_full_n_segments_from_state");
    SYM(segment_text, "whisper_full_get_segment_text_from_state");
    SYM(segment_t0, "whisper_full_get_segment_t0_from_state");
    SYM(segment_t1, "whisper_full_get_segment_t1_from_state");
    SYM(segment_no_speech, "whisper_full_get_segment_no_speech_prob_from_state");
    SYM(n_tokens, "whisper_full_n_tokens_from_state");
    SYM(token_data, "whisper_full_get_token_data_from_state");
    SYM(token_text, "whisper_full_get_token_text_from_state");
    SYM(token_eot, "whisper_token_eot");
    SYM(lang_id, "whisper_lang_id");
    SYM(lang_str, "whisper_lang_str");
    SYM(full_lang_id, "whisper_full_lang_id_from_state");
    SYM(is_multilingual, "whisper_is_multilingual");
    SYM(n_vocab, "whisper_n_vocab");
    SYM(n_text_layer, "whisper_model_n_text_layer");
    SYM(model_type, "whisper_model_type_readable");
    SYM(log_set, "whisper_log_set");
    SYM(system_info, "whisper_print_system_info");
    SYM(n_audio_ctx, "whisper_model_n_audio_ctx");
    /* The defaults the library fills in must look like 1.8's: a wrong layout would show here. */
    struct w_full_params *p = W.full_default_params_by_ref(1);
    bool sane = p && p->strategy == 1 && p->n_max_text_ctx == 16384 && p->beam_search.beam_size > 0 && p->no_speech_thold == 0.6f &&
                p->grammar_penalty == 100.0f && p->thold_pt == 0.01f &&
                p->language && strcmp(p->language, "en") == 0 && p->vad == false && p->abort_callback == NULL;
    if (p) W.free_params(p);
    if (!sane) {
        snprintf(error, error_size, "%s (whisper.cpp %s): its decoding parameters are not laid out as in 1.8.x", path, version);
        goto fail;
    }
    snprintf(W.version, sizeof W.version, "%s", version);
    W.log_set(on_log, NULL);
    W.handle = handle;
    atexit(finish_decodings);
    pthread_mutex_unlock(&load_lock);
    return 0;
fail:
    memset(&W, 0, sizeof W);
    dlclose(handle);
    pthread_mutex_unlock(&load_lock);
    return -1;
}

const char *vp_whisper_version(void) { return W.version; }

void vp_whisper_flag_set(int *flag, int value) { __atomic_store_n(flag, value, __ATOMIC_SEQ_CST); }
int vp_whisper_flag_get(const int *flag) { return __atomic_load_n(flag, __ATOMIC_SEQ_CST); }

const char *vp_whisper_system_info(void) { return W.handle && W.system_info ? W.system_info() : ""; }
/* zlib, opened at first use (it is on every system that has whisper.cpp's dependencies): linking it
 * into every voicepipe program is not needed for this one measurement. */
typedef int (*vp_compress2_fn)(unsigned char *, unsigned long *, const unsigned char *, unsigned long, int);
typedef unsigned long (*vp_compress_bound_fn)(unsigned long);

double vp_whisper_compression_ratio(const char *text, size_t n) {
    static vp_compress2_fn compress2_fn;
    static vp_compress_bound_fn bound_fn;
    static int tried;
    if (!text || n == 0) return 0;
    if (!__atomic_load_n(&tried, __ATOMIC_ACQUIRE)) {
        void *z = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
        if (z) {
            *(void **)&compress2_fn = dlsym(z, "compress2");
            *(void **)&bound_fn = dlsym(z, "compressBound");
        }
        __atomic_store_n(&tried, 1, __ATOMIC_RELEASE);
    }
    if (!compress2_fn || !bound_fn) return 0;
    unsigned long size = bound_fn((unsigned long)n);
    unsigned char *out = malloc(size);
    if (!out) return 0;
    double ratio = compress2_fn(out, &size, (const unsigned char *)text, (unsigned long)n, 9) == 0 && size > 0 ? (double)n / (double)size : 0;
    free(out);
    return ratio;
}

int vp_whisper_model_n_audio_ctx(vp_whisper_model *model) { return W.n_audio_ctx(model); }

static void warm_up(vp_whisper_model *model);

vp_whisper_model *vp_whisper_model_load(const char *path, char *error, size_t error_size) {
    if (!W.handle) { snprintf(error, error_size, "libwhisper is not loaded"); return NULL; }
    struct w_context_params *cp = W.context_default_params_by_ref();
    if (!cp) { snprintf(error, error_size, "whisper_context_default_params_by_ref failed"); return NULL; }
    cp->use_gpu = false;
    /* Flash attention off: it takes about 20 % off a decoding on the CPU (580 -> 475 ms for 2.5 s of
     * speech, tiny.en, 2 threads), but its arithmetic changes words against other Whisper
     * implementations on the same weights (4.1 points of word error rate against faster-whisper on the
     * 66 utterances of bench/whisper-bench.py); without it whisper.cpp decodes as they do. */
    cp->flash_attn = false;
    pthread_mutex_lock(&log_lock);
    last_error[0] = 0;
    pthread_mutex_unlock(&log_lock);
    /* Loading counts as work in flight too: exit must not tear ggml down under it. */
    atomic_fetch_add(&in_flight, 1);
    void *ctx = atomic_load(&shutting_down) ? NULL : W.init_no_state(path, *cp);
    atomic_fetch_sub(&in_flight, 1);
    W.free_context_params(cp);
    if (!ctx) { take_log(error, error_size, "whisper.cpp could not load the model"); return NULL; }
    warm_up((vp_whisper_model *)ctx);
    return (vp_whisper_model *)ctx;
}

void vp_whisper_model_free(vp_whisper_model *model) { if (model) W.free_ctx(model); }
int vp_whisper_model_is_multilingual(vp_whisper_model *model) { return W.is_multilingual(model); }
int vp_whisper_model_n_vocab(vp_whisper_model *model) { return W.n_vocab(model); }
int vp_whisper_model_n_text_layer(vp_whisper_model *model) { return W.n_text_layer(model); }
const char *vp_whisper_model_type(vp_whisper_model *model) { return W.model_type(model); }
int vp_whisper_lang_id(const char *code) { return W.handle ? W.lang_id(code) : -2; }
const char *vp_whisper_lang_str(int id) { return W.handle && id >= 0 ? W.lang_str(id) : ""; }

vp_whisper_state *vp_whisper_state_new(vp_whisper_model *model) {
    atomic_fetch_add(&in_flight, 1);
    void *state = atomic_load(&shutting_down) ? NULL : W.init_state(model);
    atomic_fetch_sub(&in_flight, 1);
    return (vp_whisper_state *)state;
}
void vp_whisper_state_free(vp_whisper_state *state) { if (state) W.free_state(state); }

static bool should_abort(void *data) {
    const int *flag = (const int *)data;
    return atomic_load(&shutting_down) || (flag && __atomic_load_n(flag, __ATOMIC_SEQ_CST) != 0);
}

int vp_whisper_run(vp_whisper_model *model, vp_whisper_state *state, const vp_whisper_request *r,
                   const float *samples, int n, char *error, size_t error_size) {
    if (atomic_load(&shutting_down)) { snprintf(error, error_size, "the process is exiting"); return -1; }
    int beam = r->beam_size > 1;
    struct w_full_params *p = W.full_default_params_by_ref(beam ? 1 : 0);
    if (!p) { snprintf(error, error_size, "whisper_full_default_params_by_ref failed"); return -1; }
    p->n_threads = r->n_threads > 0 ? r->n_threads : 1;
    p->translate = r->translate;
    p->no_context = true;
    p->no_timestamps = r->no_timestamps;
    p->single_segment = r->single_segment;
    p->print_special = p->print_progress = p->print_realtime = p->print_timestamps = false;
    p->token_timestamps = r->token_timestamps;
    p->max_tokens = r->max_tokens;
    p->initial_prompt = r->initial_prompt;
    p->language = r->language && r->language[0] ? r->language : "auto";
    p->detect_language = false;
    if (beam) p->beam_search.beam_size = r->beam_size;
    if (!r->temperature_fallback) p->temperature_inc = 0.0f;
    p->audio_ctx = r->audio_ctx > 0 ? r->audio_ctx : 0;
    p->abort_callback = should_abort;
    p->abort_callback_user_data = (void *)r->abort_flag;
    struct w_full_params copy = *p;
    W.free_params(p);
    pthread_mutex_lock(&log_lock);
    last_error[0] = 0;
    pthread_mutex_unlock(&log_lock);
    atomic_fetch_add(&in_flight, 1);
    int rc = atomic_load(&shutting_down) ? -1 : W.full_with_state(model, state, copy, samples, n);
    atomic_fetch_sub(&in_flight, 1);
    if (!atomic_exchange(&exit_handler_registered, 1)) atexit(finish_decodings);
    if (rc != 0) {
        char what[64];
        snprintf(what, sizeof what, "whisper_full failed (%d)", rc);
        take_log(error, error_size, what);
    }
    return rc;
}

/* The first decoding in the process makes ggml build some objects, whose destructors are registered
 * with exit then: an exit during that decoding would run them under it (a crash in ggml's CPU backend).
 * So a first decoding (1 s of silence, one token) runs here, in the thread loading the model, before
 * anyone else has it; vp_whisper_run then registers the handler that waits for decodings at exit, which
 * runs before those destructors. */
static void warm_up(vp_whisper_model *model) {
    static const float silence[16000];
    vp_whisper_state *state = vp_whisper_state_new(model);
    if (!state) return;
    vp_whisper_request r;
    memset(&r, 0, sizeof r);
    r.n_threads = 1;
    r.beam_size = 1;
    r.language = "en";
    r.no_timestamps = true;
    r.single_segment = true;
    r.max_tokens = 1;
    r.audio_ctx = 64;  /* the same code paths as a whole window, at a twentieth of its cost */
    char error[256];
    (void)vp_whisper_run(model, state, &r, silence, 16000, error, sizeof error);
    vp_whisper_state_free(state);
}

int vp_whisper_n_segments(vp_whisper_state *state) { return W.n_segments(state); }
const char *vp_whisper_segment_text(vp_whisper_state *state, int i) { return W.segment_text(state, i); }
int64_t vp_whisper_segment_t0(vp_whisper_state *state, int i) { return W.segment_t0(state, i); }
int64_t vp_whisper_segment_t1(vp_whisper_state *state, int i) { return W.segment_t1(state, i); }
float vp_whisper_segment_no_speech(vp_whisper_state *state, int i) { return W.segment_no_speech(state, i); }
int vp_whisper_detected_language(vp_whisper_state *state) { return W.full_lang_id(state); }
int vp_whisper_n_tokens(vp_whisper_state *state, int i) { return W.n_tokens(state, i); }

vp_whisper_token vp_whisper_get_token(vp_whisper_model *model, vp_whisper_state *state, int segment, int token) {
    struct w_token_data d = W.token_data(state, segment, token);
    vp_whisper_token t;
    t.id = d.id;
    t.p = d.p;
    t.t0 = d.t0;
    t.t1 = d.t1;
    t.special = d.id >= W.token_eot(model);
    t.text = W.token_text(model, state, segment, token);
    return t;
}
