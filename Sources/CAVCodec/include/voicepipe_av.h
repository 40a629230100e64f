#pragma once
/* voicepipe's narrow C interface to FFmpeg (libavcodec, libavformat, libswresample): an AAC-LC
 * encoder and decoder working on interleaved s16 PCM, and a reader that decodes any audio file
 * FFmpeg can open to interleaved s16 at the file's own rate and channel count. No FFmpeg type
 * crosses this interface. Every function that can fail writes a message to `err` (may be NULL). */
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vp_aac_encoder vp_aac_encoder;
typedef struct vp_aac_decoder vp_aac_decoder;
typedef struct vp_media_reader vp_media_reader;

/* Loads FFmpeg's libraries now (once per process; later calls return at once): 0 when they are there,
 * -1 with the reason in err. Nodes call it when they are built, so the load does not delay a running graph. */
int vp_ffmpeg_load(char *err, size_t errlen);

/* AAC-LC encoder (FFmpeg's native `aac`), `bitrate` bits per second. NULL on failure. */
vp_aac_encoder *vp_aac_encoder_create(int rate, int channels, int bitrate, char *err, size_t errlen);
/* Samples per channel in one AAC frame (1024). */
int vp_aac_encoder_frame_size(const vp_aac_encoder *e);
/* Encoder delay in samples per channel (priming: the decoder's output lags the input by this). */
int vp_aac_encoder_delay(const vp_aac_encoder *e);
/* The AudioSpecificConfig (ISO 14496-3) of the stream; returns its length, or -1 if `cap` is too small. */
int vp_aac_encoder_config(const vp_aac_encoder *e, uint8_t *out, int cap);
/* Queues exactly one frame (frame_size samples per channel, interleaved); `pcm == NULL` drains. 0 or -1. */
int vp_aac_encoder_send(vp_aac_encoder *e, const int16_t *pcm, char *err, size_t errlen);
/* Takes the next encoded frame: its length (> 0), 0 when more input is needed, -1 after the drain,
 * -2 on error. `pts` receives its position in samples (negative for priming). */
int vp_aac_encoder_receive(vp_aac_encoder *e, uint8_t *out, int cap, int64_t *pts, char *err, size_t errlen);
void vp_aac_encoder_destroy(vp_aac_encoder *e);

/* AAC decoder for raw access units; `config` is the AudioSpecificConfig (may be NULL for AAC-LC at
 * `rate`/`channels`). Output is interleaved s16 at the stream's rate and channel count. */
vp_aac_decoder *vp_aac_decoder_create(int rate, int channels, const uint8_t *config, int config_len, char *err, size_t errlen);
/* Decodes one access unit into `out` (room for `cap` samples in total). Returns samples per channel
 * written (0 is possible while the decoder primes), or -1 on error. */
int vp_aac_decoder_decode(vp_aac_decoder *d, const uint8_t *packet, int len, int16_t *out, int cap,
                          int *channels, int *rate, char *err, size_t errlen);
void vp_aac_decoder_destroy(vp_aac_decoder *d);

/* The sample rates voicepipe reads from a file (as for WAV); a stream outside them is refused. */
#define VP_MEDIA_MIN_RATE 1000
#define VP_MEDIA_MAX_RATE 768000

/* Opens an audio file of any container and codec FFmpeg knows (M4A/AAC, MP3, Ogg Opus/Vorbis, FLAC, ...).
 * NULL when it cannot be opened or holds no decodable audio stream. */
vp_media_reader *vp_media_open(const char *path, char *err, size_t errlen);
int vp_media_rate(const vp_media_reader *r);
int vp_media_channels(const vp_media_reader *r);
/* Duration in seconds, or a negative number when the container does not say. */
double vp_media_duration(const vp_media_reader *r);
/* Codec and container names, e.g. "aac" and "mov,mp4,m4a,3gp,3g2,mj2". */
const char *vp_media_codec(const vp_media_reader *r);
const char *vp_media_container(const vp_media_reader *r);
/* Reads up to `cap` interleaved s16 samples in total (whole sample frames). Returns samples per channel
 * (> 0), 0 at the end of the file, -1 on a decoding error (message in `err`). A frame whose rate or
 * channel count differs from the stream's is converted to the stream's format, unless its rate is
 * outside VP_MEDIA_MIN_RATE...VP_MEDIA_MAX_RATE or it would decode to more than 32 MB: then -1. */
int vp_media_read(vp_media_reader *r, int16_t *out, int cap, char *err, size_t errlen);
/* Damage met so far (reading past it, as FFmpeg's tools do): the number of frames skipped or that
 * could not be decoded, and in `first`/`last` the media time (s) where the first and last were. */
int vp_media_damage(const vp_media_reader *r, double *first, double *last);
/* Starts over from the beginning. 0 or -1. */
int vp_media_rewind(vp_media_reader *r, char *err, size_t errlen);
void vp_media_close(vp_media_reader *r);

#ifdef __cplusplus
}
#endif
