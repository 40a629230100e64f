/*
 * voicepipe_aec.h - acoustic echo cancellation for voicepipe's `aec` node.
 *
 * A plain C interface over two engines:
 *   - VP_AEC_WEBRTC: the AEC of webrtc-audio-processing 0.3 (the "AEC2" generation), with the
 *     extended filter and delay-agnostic mode on, high-pass filter on, noise suppression and
 *     gain control off unless asked for.
 *   - VP_AEC_SPEEX:  speexdsp's MDF adaptive filter followed by speex_preprocess as residual
 *     echo suppressor (denoise, AGC and dereverb off unless asked for).
 *
 * The caller feeds the two streams in lockstep, exactly 10 ms per call: `near` is what the
 * microphone captured, `far` is what was sent to the loudspeaker for the same 10 ms (the
 * reference). Samples are signed 16-bit, interleaved when channels == 2. The output has the
 * same format as `near` and belongs to the same instant: neither engine adds latency.
 *
 * A handle is not thread-safe: call process/setters/stats from one thread at a time, except
 * vp_aec_set_delay_ms, which may be called from any thread.
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
 * `filter_ms` is the echo tail the adaptive filter covers; 0 picks the engine's default
 * (webrtc: fixed by the library, 128 ms with the extended filter; speex: 200 ms). For speex the
 * tail is counted after the delay given to vp_aec_set_delay_ms.
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

/* How late the echo of a `far` frame arrives in `near` (playback plus capture buffering), in ms,
 * when it is known. webrtc: passed on as the stream delay (the delay-agnostic estimator still
 * refines it). speex: the reference is held back by this much before the adaptive filter, so
 * the filter only has to model the room. Default 0. Clamped to 0...500. */
void vp_aec_set_delay_ms(vp_aec *aec, int delay_ms);

/* Optional processing. Level 0 turns it off.
 * noise suppression: webrtc 1 low, 2 moderate, 3 high (4 very high); speex: 1..4 maps to
 *   -10, -15, -20, -25 dB of noise attenuation.
 * suppression (residual echo suppression strength): webrtc 0 low, 1 moderate (default), 2 high;
 *   speex: 0 off (linear filter only), 1 -30/-10 dB, 2 -40/-15 dB (default), 3 -55/-25 dB
 *   (echo only / echo during near-end speech).
 * Returns 0, or a negative value when the level is out of range. */
int vp_aec_set_noise_suppression(vp_aec *aec, int level);
int vp_aec_set_suppression(vp_aec *aec, int level);

typedef struct vp_aec_stats {
    uint64_t frames;          /* 10 ms blocks processed */
    int delay_ms;             /* engine's echo delay estimate, -1 when unknown */
    int echo_likely;          /* 1 if the last block probably contained echo */
    double engine_erle_db;    /* engine's own ERLE figure (webrtc average), NAN when unavailable */
    double erle_db;           /* 10*log10(near power / output power), smoothed over ~2 s of
                                 blocks where the reference is active (includes double talk), NAN
                                 until there has been a reference */
    double far_level_dbfs;    /* smoothed reference level, dBFS */
} vp_aec_stats;

/* Fills `stats`; returns 0. */
int vp_aec_get_stats(vp_aec *aec, vp_aec_stats *stats);

/* Forgets what the adaptive filter learned (e.g. after the audio route changed). */
void vp_aec_reset(vp_aec *aec);

/* Short engine name, "webrtc" or "speex". */
const char *vp_aec_engine_name(const vp_aec *aec);

#ifdef __cplusplus
}
#endif

#endif /* VOICEPIPE_AEC_H */
