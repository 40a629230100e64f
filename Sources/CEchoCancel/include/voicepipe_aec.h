/*
 * voicepipe_aec.h - acoustic echo cancellation for voicepipe's `aec` node.
 *
 * A plain C interface over two engines:
 *   - VP_AEC_WEBRTC: the AEC of webrtc-audio-processing 0.3 (the "AEC2" generation): adaptive
 *     filter + non-linear suppressor (low suppression), told the echo delay (see below),
 *     high-pass filter on (80 Hz), noise suppression and gain control off unless asked for.
 *   - VP_AEC_SPEEX:  speexdsp's MDF adaptive filter followed by speex_preprocess as residual
 *     echo suppressor (noise floor 0 dB, AGC and dereverb off unless asked for).
 *
 * The caller feeds the two streams in lockstep, exactly 10 ms per call: `near` is what the
 * microphone captured, `far` is what was sent to the loudspeaker for the same 10 ms (the
 * reference). Samples are signed 16-bit, interleaved when channels == 2. The output has the
 * same format as `near`. Latency added to the microphone signal: webrtc about 7 ms (13 ms with
 * noise suppression), speex 10 ms (none with suppression 0 and no noise suppression).
 *
 * The echo delay (how late the reference shows up in the microphone signal: output buffering,
 * the room, capture buffering) is estimated from the signals: GCC-PHAT over 1 s windows, up to
 * 500 ms, every 250 ms while the reference is active; a new value is taken when consecutive
 * estimates agree. Until the first one (about 1 s of reference) the delay given to
 * vp_aec_set_delay_ms is used (default 0); vp_aec_set_delay_estimation(aec, 0) keeps that value.
 *
 * A handle is not thread-safe: call process/setters/stats from one thread at a time, except
 * vp_aec_set_delay_ms and vp_aec_set_delay_estimation, which may be called from any thread.
 */
#ifndef VOICEPIPE_AEC_H
#define VOICEPIPE_AEC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vp_aec vp_aec;

enum {
    VP_AEC_WEBRTC = 0,
    VP_AEC_SPEEX = 1
};

/* Creates a canceller for `sample_rate` (16000, 32000 or 48000 Hz) and `channels` (1; 2 with
 * the webrtc engine only: both `near` and `far` are then stereo).
 * `filter_ms` is the echo tail the adaptive filter covers after the echo delay; 0 picks the
 * engine's default. webrtc: 0...64 uses the library's normal filter (48 ms at 16 kHz), more
 * uses its extended filter (128 ms, more aggressive suppressor, weaker in double talk).
 * speex: the filter length itself, default 100 ms.
 * On failure returns NULL and, when `err` is not NULL, writes a message into it. */
vp_aec *vp_aec_create(int sample_rate, int channels, int engine, int filter_ms,
                      char *err, size_t errlen);

void vp_aec_destroy(vp_aec *aec);

/* Number of frames (samples per channel) each vp_aec_process call takes: sample_rate / 100. */
int vp_aec_frame_size(const vp_aec *aec);

/* Processes 10 ms. `frames` must equal vp_aec_frame_size(). `out` may alias `near`.
 * `far` may be NULL when nothing is being played (treated as silence).
 * Returns 0 on success, a negative value on error (the output is then a copy of `near`). */
int vp_aec_process(vp_aec *aec, const int16_t *near, const int16_t *far, int16_t *out, int frames);

/* The echo delay to use while there is no estimate, or always when estimation is off: ms,
 * clamped to 0...500, default 0. webrtc: passed on as the stream delay. speex: the reference is
 * held back by the delay minus 10 ms before the adaptive filter, so the filter only has to model
 * the room. */
void vp_aec_set_delay_ms(vp_aec *aec, int delay_ms);

/* Turns the delay estimator off (0) or on (non-zero, the default). */
void vp_aec_set_delay_estimation(vp_aec *aec, int enabled);

/* Optional processing. Level 0 turns it off.
 * noise suppression: webrtc 1 low, 2 moderate, 3 high, 4 very high; speex: 1...4 maps to
 *   -10, -15, -20, -25 dB of noise attenuation.
 * suppression (residual echo suppression strength): webrtc 0 low (default), 1 moderate (the
 *   library's and PulseAudio's default: stronger residual echo suppression, more near-end loss in
 *   double talk), 2 high;
 *   speex: 0 off (linear filter only), 1 -30/-10 dB, 2 -40/-15 dB (default), 3 -55/-25 dB
 *   (echo alone / echo during near-end speech).
 * Return 0, or a negative value when the level is out of range. */
int vp_aec_set_noise_suppression(vp_aec *aec, int level);
int vp_aec_set_suppression(vp_aec *aec, int level);

typedef struct vp_aec_stats {
    uint64_t frames;          /* 10 ms blocks processed */
    int delay_ms;             /* echo delay in use, ms */
    int echo_likely;          /* 1 if the last block probably contained echo */
    double engine_erle_db;    /* engine's own ERLE figure (webrtc average), NAN when unavailable */
    double erle_db;           /* 10*log10(near power / output power), smoothed over ~2 s of
                                 blocks where the reference is active (includes double talk), NAN
                                 until there has been a reference */
    double far_level_dbfs;    /* smoothed reference level, dBFS */
    int delay_estimated;      /* 1 if delay_ms comes from the estimator, 0 if it is the set value */
    int engine_delay_ms;      /* webrtc's own delay logging (median over the last second, ms,
                                 relative to the reported delay), -1 when unavailable */
} vp_aec_stats;

/* Fills `stats`; returns 0. */
int vp_aec_get_stats(vp_aec *aec, vp_aec_stats *stats);

/* Forgets what the adaptive filter and the delay estimator learned (e.g. after the audio route
 * changed). */
void vp_aec_reset(vp_aec *aec);

/* Short engine name, "webrtc" or "speex". */
const char *vp_aec_engine_name(const vp_aec *aec);

#ifdef __cplusplus
}
#endif

#endif /* VOICEPIPE_AEC_H */
