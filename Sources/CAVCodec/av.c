/* FFmpeg glue behind voicepipe_av.h: AAC-LC encode/decode and decoding of compressed audio files. */
#include "voicepipe_av.h"
#include "vp_library.h"

#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* ---- FFmpeg, loaded at first use ----
 * The libraries are opened with dlopen when the first AAC codec or compressed file is opened, not
 * linked: libavformat alone brings some 130 shared libraries (X11, cairo, every video codec), and every
 * `voicepipe` start paid for their symbol look-ups whether or not the graph reads a compressed file.
 * The headers still come from the -dev packages at build time; the sonames are those of the headers'
 * major versions. Below, each FFmpeg function this file calls is a pointer filled from the libraries,
 * and a macro makes the code call through it. */
#define VP_STR2(x) #x
#define VP_STR(x) VP_STR2(x)

static __typeof__(av_channel_layout_copy) *p_av_channel_layout_copy;
static __typeof__(av_channel_layout_default) *p_av_channel_layout_default;
static __typeof__(av_frame_alloc) *p_av_frame_alloc;
static __typeof__(av_frame_free) *p_av_frame_free;
static __typeof__(av_frame_get_buffer) *p_av_frame_get_buffer;
static __typeof__(av_frame_make_writable) *p_av_frame_make_writable;
static __typeof__(av_frame_unref) *p_av_frame_unref;
static __typeof__(av_free) *p_av_free;
static __typeof__(av_log_set_level) *p_av_log_set_level;
static __typeof__(av_mallocz) *p_av_mallocz;
static __typeof__(av_realloc) *p_av_realloc;
static __typeof__(av_rescale_rnd) *p_av_rescale_rnd;
static __typeof__(av_strerror) *p_av_strerror;
static __typeof__(av_new_packet) *p_av_new_packet;
static __typeof__(av_packet_alloc) *p_av_packet_alloc;
static __typeof__(av_packet_free) *p_av_packet_free;
static __typeof__(av_packet_unref) *p_av_packet_unref;
static __typeof__(avcodec_alloc_context3) *p_avcodec_alloc_context3;
static __typeof__(avcodec_find_decoder) *p_avcodec_find_decoder;
static __typeof__(avcodec_find_encoder_by_name) *p_avcodec_find_encoder_by_name;
static __typeof__(avcodec_flush_buffers) *p_avcodec_flush_buffers;
static __typeof__(avcodec_free_context) *p_avcodec_free_context;
static __typeof__(avcodec_open2) *p_avcodec_open2;
static __typeof__(avcodec_parameters_to_context) *p_avcodec_parameters_to_context;
static __typeof__(avcodec_receive_frame) *p_avcodec_receive_frame;
static __typeof__(avcodec_receive_packet) *p_avcodec_receive_packet;
static __typeof__(avcodec_send_frame) *p_avcodec_send_frame;
static __typeof__(avcodec_send_packet) *p_avcodec_send_packet;
static __typeof__(av_find_best_stream) *p_av_find_best_stream;
static __typeof__(av_read_frame) *p_av_read_frame;
static __typeof__(av_seek_frame) *p_av_seek_frame;
static __typeof__(avformat_close_input) *p_avformat_close_input;
static __typeof__(avformat_find_stream_info) *p_avformat_find_stream_info;
static __typeof__(avformat_open_input) *p_avformat_open_input;
static __typeof__(avformat_seek_file) *p_avformat_seek_file;
static __typeof__(swr_alloc_set_opts2) *p_swr_alloc_set_opts2;
static __typeof__(swr_convert) *p_swr_convert;
static __typeof__(swr_free) *p_swr_free;
static __typeof__(swr_init) *p_swr_init;

/* Debian 12's packages of the libraries' versions voicepipe is built with. */
#define VP_FFMPEG_PACKAGES "libavformat59 libavcodec59 libswresample4 libavutil57"

static int ffmpeg_loaded;
static char ffmpeg_problem[512];

static void load_ffmpeg(void) {
    void *avutil = vp_library_open("FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), VP_FFMPEG_PACKAGES, ffmpeg_problem, sizeof ffmpeg_problem);
    void *swresample = avutil ? vp_library_open("FFmpeg", "libswresample.so." VP_STR(LIBSWRESAMPLE_VERSION_MAJOR), VP_FFMPEG_PACKAGES, ffmpeg_problem, sizeof ffmpeg_problem) : NULL;
    void *avcodec = swresample ? vp_library_open("FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), VP_FFMPEG_PACKAGES, ffmpeg_problem, sizeof ffmpeg_problem) : NULL;
    void *avformat = avcodec ? vp_library_open("FFmpeg", "libavformat.so." VP_STR(LIBAVFORMAT_VERSION_MAJOR), VP_FFMPEG_PACKAGES, ffmpeg_problem, sizeof ffmpeg_problem) : NULL;
    int ok = avformat != NULL;
    VP_LIBRARY_RESOLVE(ok, avutil, av_channel_layout_copy, "FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avutil, av_channel_layout_default, "FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avutil, av_frame_alloc, "FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avutil, av_frame_free, "FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avutil, av_frame_get_buffer, "FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avutil, av_frame_make_writable, "FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avutil, av_frame_unref, "FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avutil, av_free, "FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avutil, av_log_set_level, "FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avutil, av_mallocz, "FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avutil, av_realloc, "FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avutil, av_rescale_rnd, "FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avutil, av_strerror, "FFmpeg", "libavutil.so." VP_STR(LIBAVUTIL_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, av_new_packet, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, av_packet_alloc, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, av_packet_free, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, av_packet_unref, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, avcodec_alloc_context3, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, avcodec_find_decoder, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, avcodec_find_encoder_by_name, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, avcodec_flush_buffers, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, avcodec_free_context, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, avcodec_open2, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, avcodec_parameters_to_context, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, avcodec_receive_frame, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, avcodec_receive_packet, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, avcodec_send_frame, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avcodec, avcodec_send_packet, "FFmpeg", "libavcodec.so." VP_STR(LIBAVCODEC_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avformat, av_find_best_stream, "FFmpeg", "libavformat.so." VP_STR(LIBAVFORMAT_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avformat, av_read_frame, "FFmpeg", "libavformat.so." VP_STR(LIBAVFORMAT_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avformat, av_seek_frame, "FFmpeg", "libavformat.so." VP_STR(LIBAVFORMAT_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avformat, avformat_close_input, "FFmpeg", "libavformat.so." VP_STR(LIBAVFORMAT_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avformat, avformat_find_stream_info, "FFmpeg", "libavformat.so." VP_STR(LIBAVFORMAT_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avformat, avformat_open_input, "FFmpeg", "libavformat.so." VP_STR(LIBAVFORMAT_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, avformat, avformat_seek_file, "FFmpeg", "libavformat.so." VP_STR(LIBAVFORMAT_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, swresample, swr_alloc_set_opts2, "FFmpeg", "libswresample.so." VP_STR(LIBSWRESAMPLE_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, swresample, swr_convert, "FFmpeg", "libswresample.so." VP_STR(LIBSWRESAMPLE_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, swresample, swr_free, "FFmpeg", "libswresample.so." VP_STR(LIBSWRESAMPLE_VERSION_MAJOR), ffmpeg_problem);
    VP_LIBRARY_RESOLVE(ok, swresample, swr_init, "FFmpeg", "libswresample.so." VP_STR(LIBSWRESAMPLE_VERSION_MAJOR), ffmpeg_problem);
    if (ok) {
        p_av_log_set_level(AV_LOG_FATAL);
        ffmpeg_loaded = 1;
    }
}

/* Loads FFmpeg once per process; 0 when it is there, -1 with the reason in err otherwise. */
static int ffmpeg_ready(char *err, size_t errlen) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_ffmpeg);
    if (ffmpeg_loaded) return 0;
    if (err && errlen) snprintf(err, errlen, "%s", ffmpeg_problem);
    return -1;
}

int vp_ffmpeg_load(char *err, size_t errlen) { return ffmpeg_ready(err, errlen); }

#define av_channel_layout_copy (*p_av_channel_layout_copy)
#define av_channel_layout_default (*p_av_channel_layout_default)
#define av_frame_alloc (*p_av_frame_alloc)
#define av_frame_free (*p_av_frame_free)
#define av_frame_get_buffer (*p_av_frame_get_buffer)
#define av_frame_make_writable (*p_av_frame_make_writable)
#define av_frame_unref (*p_av_frame_unref)
#define av_free (*p_av_free)
#define av_log_set_level (*p_av_log_set_level)
#define av_mallocz (*p_av_mallocz)
#define av_realloc (*p_av_realloc)
#define av_rescale_rnd (*p_av_rescale_rnd)
#define av_strerror (*p_av_strerror)
#define av_new_packet (*p_av_new_packet)
#define av_packet_alloc (*p_av_packet_alloc)
#define av_packet_free (*p_av_packet_free)
#define av_packet_unref (*p_av_packet_unref)
#define avcodec_alloc_context3 (*p_avcodec_alloc_context3)
#define avcodec_find_decoder (*p_avcodec_find_decoder)
#define avcodec_find_encoder_by_name (*p_avcodec_find_encoder_by_name)
#define avcodec_flush_buffers (*p_avcodec_flush_buffers)
#define avcodec_free_context (*p_avcodec_free_context)
#define avcodec_open2 (*p_avcodec_open2)
#define avcodec_parameters_to_context (*p_avcodec_parameters_to_context)
#define avcodec_receive_frame (*p_avcodec_receive_frame)
#define avcodec_receive_packet (*p_avcodec_receive_packet)
#define avcodec_send_frame (*p_avcodec_send_frame)
#define avcodec_send_packet (*p_avcodec_send_packet)
#define av_find_best_stream (*p_av_find_best_stream)
#define av_read_frame (*p_av_read_frame)
#define av_seek_frame (*p_av_seek_frame)
#define avformat_close_input (*p_avformat_close_input)
#define avformat_find_stream_info (*p_avformat_find_stream_info)
#define avformat_open_input (*p_avformat_open_input)
#define avformat_seek_file (*p_avformat_seek_file)
#define swr_alloc_set_opts2 (*p_swr_alloc_set_opts2)
#define swr_convert (*p_swr_convert)
#define swr_free (*p_swr_free)
#define swr_init (*p_swr_init)


static void put_err(char *err, size_t len, const char *what, int code) {
    if (!err || len == 0) return;
    if (code < 0) {
        char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
        av_strerror(code, buf, sizeof buf);
        snprintf(err, len, "%s: %s", what, buf);
    } else {
        snprintf(err, len, "%s", what);
    }
}

/* ---- sample conversion: any decoded frame to interleaved s16 at a fixed rate and channel count ---- */

typedef struct {
    SwrContext *swr;
    int in_rate, in_channels, in_format;
    int out_rate, out_channels;
} converter;

static int converter_setup(converter *c, const AVFrame *f, char *err, size_t errlen) {
    int channels = f->ch_layout.nb_channels;
    if (c->swr && c->in_rate == f->sample_rate && c->in_channels == channels && c->in_format == f->format) return 0;
    swr_free(&c->swr);
    AVChannelLayout in_layout, out_layout;
    av_channel_layout_default(&in_layout, channels);
    av_channel_layout_default(&out_layout, c->out_channels);
    int r = swr_alloc_set_opts2(&c->swr, &out_layout, AV_SAMPLE_FMT_S16, c->out_rate,
                                &in_layout, (enum AVSampleFormat)f->format, f->sample_rate, 0, NULL);
    if (r >= 0) r = swr_init(c->swr);
    if (r < 0) { swr_free(&c->swr); put_err(err, errlen, "cannot set up sample conversion", r); return -1; }
    c->in_rate = f->sample_rate; c->in_channels = channels; c->in_format = f->format;
    return 0;
}

/* Converts `f`; returns samples per channel written to `out` (room for `cap_frames`), or -1. */
static int converter_run(converter *c, const AVFrame *f, int16_t *out, int cap_frames, char *err, size_t errlen) {
    if (converter_setup(c, f, err, errlen) < 0) return -1;
    uint8_t *dst[1] = { (uint8_t *)out };
    int n = swr_convert(c->swr, dst, cap_frames, (const uint8_t **)f->extended_data, f->nb_samples);
    if (n < 0) { put_err(err, errlen, "sample conversion failed", n); return -1; }
    return n;
}

static int converter_room(converter *c, const AVFrame *f) {
    /* Output samples for this frame at the output rate, plus what the resampler holds. */
    int64_t n = av_rescale_rnd(f->nb_samples, c->out_rate, f->sample_rate > 0 ? f->sample_rate : c->out_rate, AV_ROUND_UP);
    return (int)n + 256;
}

/* ---- AAC-LC encoder ---- */

struct vp_aac_encoder {
    AVCodecContext *ctx;
    AVFrame *frame;
    AVPacket *pkt;
    int channels;
    int64_t next_pts;
};

vp_aac_encoder *vp_aac_encoder_create(int rate, int channels, int bitrate, char *err, size_t errlen) {
    if (ffmpeg_ready(err, errlen) != 0) return NULL;
    const AVCodec *codec = avcodec_find_encoder_by_name("aac");
    if (!codec) { put_err(err, errlen, "this FFmpeg has no AAC encoder", 0); return NULL; }
    vp_aac_encoder *e = av_mallocz(sizeof *e);
    if (!e) return NULL;
    e->channels = channels;
    e->ctx = avcodec_alloc_context3(codec);
    e->frame = av_frame_alloc();
    e->pkt = av_packet_alloc();
    if (!e->ctx || !e->frame || !e->pkt) { put_err(err, errlen, "out of memory", 0); vp_aac_encoder_destroy(e); return NULL; }
    e->ctx->sample_rate = rate;
    av_channel_layout_default(&e->ctx->ch_layout, channels);
    e->ctx->sample_fmt = AV_SAMPLE_FMT_FLTP;
    e->ctx->bit_rate = bitrate;
    e->ctx->profile = FF_PROFILE_AAC_LOW;
    e->ctx->time_base = (AVRational){1, rate};
    e->ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    int r = avcodec_open2(e->ctx, codec, NULL);
    if (r < 0) { put_err(err, errlen, "cannot open the AAC encoder", r); vp_aac_encoder_destroy(e); return NULL; }
    e->frame->nb_samples = e->ctx->frame_size;
    e->frame->format = AV_SAMPLE_FMT_FLTP;
    e->frame->sample_rate = rate;
    av_channel_layout_copy(&e->frame->ch_layout, &e->ctx->ch_layout);
    r = av_frame_get_buffer(e->frame, 0);
    if (r < 0) { put_err(err, errlen, "cannot allocate an audio frame", r); vp_aac_encoder_destroy(e); return NULL; }
    return e;
}

int vp_aac_encoder_frame_size(const vp_aac_encoder *e) { return e->ctx->frame_size; }
int vp_aac_encoder_delay(const vp_aac_encoder *e) { return e->ctx->initial_padding; }

int vp_aac_encoder_config(const vp_aac_encoder *e, uint8_t *out, int cap) {
    if (e->ctx->extradata_size > cap) return -1;
    if (e->ctx->extradata_size > 0) memcpy(out, e->ctx->extradata, (size_t)e->ctx->extradata_size);
    return e->ctx->extradata_size;
}

int vp_aac_encoder_send(vp_aac_encoder *e, const int16_t *pcm, char *err, size_t errlen) {
    int r;
    if (!pcm) {
        r = avcodec_send_frame(e->ctx, NULL);
    } else {
        r = av_frame_make_writable(e->frame);
        if (r < 0) { put_err(err, errlen, "cannot write the audio frame", r); return -1; }
        int n = e->frame->nb_samples, ch = e->channels;
        for (int c = 0; c < ch; c++) {
            float *plane = (float *)e->frame->data[c];
            for (int i = 0; i < n; i++) plane[i] = (float)pcm[i * ch + c] * (1.0f / 32768.0f);
        }
        e->frame->pts = e->next_pts;
        e->next_pts += n;
        r = avcodec_send_frame(e->ctx, e->frame);
    }
    if (r < 0 && r != AVERROR_EOF) { put_err(err, errlen, "AAC encoding failed", r); return -1; }
    return 0;
}

int vp_aac_encoder_receive(vp_aac_encoder *e, uint8_t *out, int cap, int64_t *pts, char *err, size_t errlen) {
    int r = avcodec_receive_packet(e->ctx, e->pkt);
    if (r == AVERROR(EAGAIN)) return 0;
    if (r == AVERROR_EOF) return -1;
    if (r < 0) { put_err(err, errlen, "AAC encoding failed", r); return -2; }
    int size = e->pkt->size;
    if (size > cap) { av_packet_unref(e->pkt); put_err(err, errlen, "AAC frame larger than the output buffer", 0); return -2; }
    memcpy(out, e->pkt->data, (size_t)size);
    if (pts) *pts = e->pkt->pts;
    av_packet_unref(e->pkt);
    return size;
}

void vp_aac_encoder_destroy(vp_aac_encoder *e) {
    if (!e) return;
    avcodec_free_context(&e->ctx);
    av_frame_free(&e->frame);
    av_packet_free(&e->pkt);
    av_free(e);
}

/* ---- AAC decoder ---- */

struct vp_aac_decoder {
    AVCodecContext *ctx;
    AVFrame *frame;
    AVPacket *pkt;
    converter conv;
};

static const int aac_rates[] = {96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350};

vp_aac_decoder *vp_aac_decoder_create(int rate, int channels, const uint8_t *config, int config_len, char *err, size_t errlen) {
    if (ffmpeg_ready(err, errlen) != 0) return NULL;
    const AVCodec *codec = avcodec_find_decoder(AV_CODEC_ID_AAC);
    if (!codec) { put_err(err, errlen, "this FFmpeg has no AAC decoder", 0); return NULL; }
    uint8_t asc[2];
    if (!config || config_len <= 0) {
        int index = -1;
        for (int i = 0; i < 13; i++) if (aac_rates[i] == rate) index = i;
        if (index < 0 || channels < 1 || channels > 7) { put_err(err, errlen, "no AAC configuration for this rate and channel count", 0); return NULL; }
        asc[0] = (uint8_t)((2 << 3) | (index >> 1));            /* object type 2: AAC-LC */
        asc[1] = (uint8_t)(((index & 1) << 7) | (channels << 3));
        config = asc;
        config_len = 2;
    }
    vp_aac_decoder *d = av_mallocz(sizeof *d);
    if (!d) return NULL;
    d->ctx = avcodec_alloc_context3(codec);
    d->frame = av_frame_alloc();
    d->pkt = av_packet_alloc();
    if (!d->ctx || !d->frame || !d->pkt) { put_err(err, errlen, "out of memory", 0); vp_aac_decoder_destroy(d); return NULL; }
    d->ctx->sample_rate = rate;
    av_channel_layout_default(&d->ctx->ch_layout, channels);
    d->ctx->extradata = av_mallocz((size_t)config_len + AV_INPUT_BUFFER_PADDING_SIZE);
    if (!d->ctx->extradata) { vp_aac_decoder_destroy(d); return NULL; }
    memcpy(d->ctx->extradata, config, (size_t)config_len);
    d->ctx->extradata_size = config_len;
    int r = avcodec_open2(d->ctx, codec, NULL);
    if (r < 0) { put_err(err, errlen, "cannot open the AAC decoder", r); vp_aac_decoder_destroy(d); return NULL; }
    d->conv.out_rate = rate;
    d->conv.out_channels = channels;
    return d;
}

int vp_aac_decoder_decode(vp_aac_decoder *d, const uint8_t *packet, int len, int16_t *out, int cap,
                          int *channels, int *rate, char *err, size_t errlen) {
    int r = av_new_packet(d->pkt, len);
    if (r < 0) { put_err(err, errlen, "out of memory", r); return -1; }
    memcpy(d->pkt->data, packet, (size_t)len);
    r = avcodec_send_packet(d->ctx, d->pkt);
    av_packet_unref(d->pkt);
    if (r < 0) { put_err(err, errlen, "AAC decoding failed", r); return -1; }
    int written = 0;
    int ch = d->conv.out_channels;
    for (;;) {
        r = avcodec_receive_frame(d->ctx, d->frame);
        if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) break;
        if (r < 0) { put_err(err, errlen, "AAC decoding failed", r); return -1; }
        int room = cap / ch - written;
        if (room < converter_room(&d->conv, d->frame)) { av_frame_unref(d->frame); put_err(err, errlen, "decoded frame larger than the output buffer", 0); return -1; }
        int n = converter_run(&d->conv, d->frame, out + (size_t)written * ch, room, err, errlen);
        av_frame_unref(d->frame);
        if (n < 0) return -1;
        written += n;
    }
    if (channels) *channels = ch;
    if (rate) *rate = d->conv.out_rate;
    return written;
}

void vp_aac_decoder_destroy(vp_aac_decoder *d) {
    if (!d) return;
    avcodec_free_context(&d->ctx);
    av_frame_free(&d->frame);
    av_packet_free(&d->pkt);
    swr_free(&d->conv.swr);
    av_free(d);
}

/* ---- audio files ---- */

/* The most one decoded frame may take; the rates a frame may change to (those a file may have). */
#define VP_MEDIA_MAX_FRAME_BYTES (32 << 20)

struct vp_media_reader {
    AVFormatContext *fmt;
    AVCodecContext *ctx;
    AVPacket *pkt;
    AVFrame *frame;
    int stream;
    converter conv;
    int16_t *pending;
    int pending_cap, pending_frames, pending_offset;
    int flushing, finished;
    int format_changes;
    /* Sample frames delivered so far (the media time of what comes next). */
    int64_t decoded;
    /* Damage: frames skipped or undecodable, in all and in a row; media time of the first and last. */
    int damaged, damaged_in_row;
    double damage_first, damage_last;
    /* Raw streams (MP3, ADTS AAC) are contiguous: bytes skipped between packets are damage. */
    int contiguous;
    int64_t next_pos, first_pos;
    /* Media time (s) of the packet being decoded, from its timestamp; -1 when it has none. */
    double packet_time;
};

/* Decoding goes on past damage, as FFmpeg's own tools do; only this many damaged frames in a row
 * with nothing decodable between them end the file with an error. */
#define VP_MEDIA_MAX_DAMAGE_IN_ROW 500

static double media_now(const vp_media_reader *m) {
    return m->conv.out_rate > 0 ? (double)m->decoded / m->conv.out_rate : 0;
}

static void note_damage(vp_media_reader *m, int frames) {
    if (frames <= 0) return;
    /* Where the damage is in the file: the packet's own time when it has one (audio lost earlier
     * does not shift it), else the audio decoded so far. */
    double t = m->packet_time >= 0 ? m->packet_time : media_now(m);
    if (m->damaged == 0) m->damage_first = t;
    m->damage_last = t;
    m->damaged += frames;
    m->damaged_in_row += frames;
}

vp_media_reader *vp_media_open(const char *path, char *err, size_t errlen) {
    if (ffmpeg_ready(err, errlen) != 0) return NULL;
    vp_media_reader *m = av_mallocz(sizeof *m);
    if (!m) return NULL;
    int r = avformat_open_input(&m->fmt, path, NULL, NULL);
    if (r < 0) { put_err(err, errlen, "not a file FFmpeg can open", r); av_free(m); return NULL; }
    r = avformat_find_stream_info(m->fmt, NULL);
    if (r < 0) { put_err(err, errlen, "cannot read the stream information", r); vp_media_close(m); return NULL; }
    const AVCodec *codec = NULL;
    m->stream = av_find_best_stream(m->fmt, AVMEDIA_TYPE_AUDIO, -1, -1, &codec, 0);
    if (m->stream < 0 || !codec) {
        put_err(err, errlen, m->stream == AVERROR_DECODER_NOT_FOUND ? "no decoder for its audio codec" : "it holds no audio stream", 0);
        vp_media_close(m);
        return NULL;
    }
    m->ctx = avcodec_alloc_context3(codec);
    m->pkt = av_packet_alloc();
    m->frame = av_frame_alloc();
    if (!m->ctx || !m->pkt || !m->frame) { put_err(err, errlen, "out of memory", 0); vp_media_close(m); return NULL; }
    r = avcodec_parameters_to_context(m->ctx, m->fmt->streams[m->stream]->codecpar);
    if (r >= 0) r = avcodec_open2(m->ctx, codec, NULL);
    if (r < 0) { put_err(err, errlen, "cannot open its audio decoder", r); vp_media_close(m); return NULL; }
    m->conv.out_rate = m->ctx->sample_rate;
    m->conv.out_channels = m->ctx->ch_layout.nb_channels;
    const char *container = m->fmt->iformat ? m->fmt->iformat->name : "";
    m->contiguous = strcmp(container, "mp3") == 0 || strcmp(container, "aac") == 0;
    m->next_pos = m->first_pos = -1;
    m->packet_time = -1;
    if (m->conv.out_rate <= 0 || m->conv.out_channels <= 0 || m->conv.out_channels > 8) {
        put_err(err, errlen, "its audio stream has no usable sample rate or channel count", 0);
        vp_media_close(m);
        return NULL;
    }

    return m;
}

int vp_media_rate(const vp_media_reader *m) { return m->conv.out_rate; }
int vp_media_channels(const vp_media_reader *m) { return m->conv.out_channels; }
const char *vp_media_codec(const vp_media_reader *m) { return m->ctx->codec ? m->ctx->codec->name : "?"; }
const char *vp_media_container(const vp_media_reader *m) { return m->fmt->iformat ? m->fmt->iformat->name : "?"; }

double vp_media_duration(const vp_media_reader *m) {
    AVStream *s = m->fmt->streams[m->stream];
    if (s->duration > 0 && s->time_base.den > 0) return (double)s->duration * av_q2d(s->time_base);
    if (m->fmt->duration > 0) return (double)m->fmt->duration / AV_TIME_BASE;
    return -1;
}

/* Decodes the next frame into `pending`. 1 = got audio, 0 = end of file, -1 = error. */
static int media_decode_next(vp_media_reader *m, char *err, size_t errlen) {
    for (;;) {
        int r = avcodec_receive_frame(m->ctx, m->frame);
        if (r == 0) {
            /* A frame whose format differs from the stream's is converted to the stream's, but only
             * within the rates and channel counts a file may have, and only when converting it
             * needs a bounded buffer: a frame declaring 1 Hz in a 384 kHz stream would otherwise
             * ask for gigabytes. */
            int rate = m->frame->sample_rate, channels = m->frame->ch_layout.nb_channels;
            if (rate != m->conv.out_rate || channels != m->conv.out_channels) {
                if (rate < VP_MEDIA_MIN_RATE || rate > VP_MEDIA_MAX_RATE || channels < 1 || channels > 8) {
                    char what[160];
                    snprintf(what, sizeof what, "the audio format changes at %.2f s from %d Hz, %d channels to %d Hz, %d channels, which cannot be played; refused",
                             media_now(m), m->conv.out_rate, m->conv.out_channels, rate, channels);
                    av_frame_unref(m->frame);
                    put_err(err, errlen, what, 0);
                    return -1;
                }
                m->format_changes++;
            }
            int64_t room64 = av_rescale_rnd(m->frame->nb_samples, m->conv.out_rate, rate > 0 ? rate : m->conv.out_rate, AV_ROUND_UP) + 256;
            if (room64 * m->conv.out_channels * (int64_t)sizeof(int16_t) > VP_MEDIA_MAX_FRAME_BYTES) {
                char what[160];
                snprintf(what, sizeof what, "a frame at %.2f s would decode to more than %d MB (%d samples at %d Hz); refused",
                         media_now(m), VP_MEDIA_MAX_FRAME_BYTES >> 20, m->frame->nb_samples, rate);
                av_frame_unref(m->frame);
                put_err(err, errlen, what, 0);
                return -1;
            }
            int room = (int)room64;
            int need = room * m->conv.out_channels;
            if (need > m->pending_cap) {
                int16_t *p = av_realloc(m->pending, (size_t)need * sizeof(int16_t));
                if (!p) { av_frame_unref(m->frame); put_err(err, errlen, "out of memory", 0); return -1; }
                m->pending = p;
                m->pending_cap = need;
            }
            int n = converter_run(&m->conv, m->frame, m->pending, room, err, errlen);
            av_frame_unref(m->frame);
            if (n < 0) return -1;
            m->pending_frames = n;
            m->pending_offset = 0;
            m->decoded += n;
            m->damaged_in_row = 0;
            if (n > 0) return 1;
            continue;
        }
        if (r == AVERROR_EOF) return 0;
        if (r != AVERROR(EAGAIN)) {
            /* A frame the decoder could not decode: skipped, counted, decoding goes on. */
            note_damage(m, 1);
            if (m->damaged_in_row > VP_MEDIA_MAX_DAMAGE_IN_ROW) {
                char what[96];
                snprintf(what, sizeof what, "undecodable audio from %.2f s (%d damaged frames in a row)", m->damage_first, m->damaged_in_row);
                put_err(err, errlen, what, r);
                return -1;
            }
            continue;
        }
        if (m->flushing) return 0;
        r = av_read_frame(m->fmt, m->pkt);
        if (r == AVERROR_EOF) {
            m->flushing = 1;
            avcodec_send_packet(m->ctx, NULL);
            continue;
        }
        if (r < 0) {
            char where[64];
            snprintf(where, sizeof where, "reading failed at %.2f s", media_now(m));
            put_err(err, errlen, where, r);
            return -1;
        }
        if (m->pkt->stream_index != m->stream) { av_packet_unref(m->pkt); continue; }
        {
            AVStream *st = m->fmt->streams[m->stream];
            int64_t ts = m->pkt->pts != AV_NOPTS_VALUE ? m->pkt->pts : m->pkt->dts;
            int64_t start = st->start_time != AV_NOPTS_VALUE ? st->start_time : 0;
            m->packet_time = ts != AV_NOPTS_VALUE && st->time_base.den > 0 ? (double)(ts - start) * av_q2d(st->time_base) : -1;
            /* In a raw stream timestamps are counted from the packets found, so frames skipped in a
             * damaged stretch do not advance them; the byte position at the stream's bit rate does. */
            if (m->contiguous && m->pkt->pos >= 0 && st->codecpar->bit_rate > 0) {
                if (m->first_pos < 0) m->first_pos = m->pkt->pos;
                m->packet_time = (double)(m->pkt->pos - m->first_pos) * 8.0 / (double)st->codecpar->bit_rate;
            }
        }
        if (m->contiguous && m->pkt->pos >= 0) {
            /* Bytes skipped since the last packet: the demuxer resynchronized past a damaged frame. */
            if (m->next_pos >= 0 && m->pkt->pos > m->next_pos) {
                int64_t size = m->pkt->size > 0 ? m->pkt->size : 1;
                note_damage(m, (int)((m->pkt->pos - m->next_pos + size - 1) / size));
            }
            m->next_pos = m->pkt->pos + m->pkt->size;
        }
        r = avcodec_send_packet(m->ctx, m->pkt);
        av_packet_unref(m->pkt);
        if (r < 0 && r != AVERROR(EAGAIN)) {
            /* A damaged packet: skipped, counted, decoding goes on (as FFmpeg's own tools do). */
            note_damage(m, 1);
            if (m->damaged_in_row > VP_MEDIA_MAX_DAMAGE_IN_ROW) {
                char what[96];
                snprintf(what, sizeof what, "undecodable audio from %.2f s (%d damaged frames in a row)", m->damage_first, m->damaged_in_row);
                put_err(err, errlen, what, r);
                return -1;
            }
        }
    }
}

int vp_media_read(vp_media_reader *m, int16_t *out, int cap, char *err, size_t errlen) {
    int ch = m->conv.out_channels;
    int want = cap / ch;
    if (want <= 0 || m->finished) return 0;
    int written = 0;
    while (written < want) {
        if (m->pending_offset >= m->pending_frames) {
            int r = media_decode_next(m, err, errlen);
            if (r < 0) return written > 0 ? written : -1;
            if (r == 0) { m->finished = 1; break; }
        }
        int take = m->pending_frames - m->pending_offset;
        if (take > want - written) take = want - written;
        memcpy(out + (size_t)written * ch, m->pending + (size_t)m->pending_offset * ch, (size_t)take * ch * sizeof(int16_t));
        m->pending_offset += take;
        written += take;
    }
    return written;
}

int vp_media_damage(const vp_media_reader *m, double *first, double *last) {
    if (first) *first = m->damage_first;
    if (last) *last = m->damage_last;
    return m->damaged;
}

int vp_media_rewind(vp_media_reader *m, char *err, size_t errlen) {
    int r = av_seek_frame(m->fmt, m->stream, 0, AVSEEK_FLAG_BACKWARD);
    if (r < 0) r = avformat_seek_file(m->fmt, -1, INT64_MIN, 0, 0, 0);
    if (r < 0) { put_err(err, errlen, "cannot seek back to the start", r); return -1; }
    avcodec_flush_buffers(m->ctx);
    m->pending_frames = m->pending_offset = 0;
    m->flushing = m->finished = 0;
    m->decoded = 0;
    m->next_pos = -1;
    return 0;
}

void vp_media_close(vp_media_reader *m) {
    if (!m) return;
    avcodec_free_context(&m->ctx);
    av_packet_free(&m->pkt);
    av_frame_free(&m->frame);
    avformat_close_input(&m->fmt);
    swr_free(&m->conv.swr);
    av_free(m->pending);
    av_free(m);
}
