// Acoustic echo cancellation behind the C interface of voicepipe_aec.h.
//
// Engines:
//   webrtc  webrtc-audio-processing 0.3 (Debian's libwebrtc-audio-processing), float interface:
//           AEC (normal 48 ms filter, or the extended 128 ms one when filter_ms > 64) fed with
//           our delay estimate, low suppression, high-pass filter on, noise suppression and AGC
//           off.
//   speex   speexdsp's MDF filter + speex_preprocess as residual echo suppressor. The reference
//           is held back by the bulk delay so the filter only has to cover the room.
//
// Both get the echo delay from an estimator of our own (GCC-PHAT between the microphone and the
// reference, at 8 kHz, over 1 s windows every 250 ms); the caller's value is used until the first
// estimate, or always when estimation is turned off.
//
// Build flags (see bench/aec/build.sh):
//   -DWEBRTC_AUDIO_PROCESSING_ONLY_BUILD -DWEBRTC_POSIX -DWEBRTC_LINUX
//   -I/usr/include/webrtc_audio_processing  -lwebrtc_audio_processing -lspeexdsp

#include "voicepipe_aec.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <complex>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <new>
#include <vector>

#include <webrtc/modules/audio_processing/include/audio_processing.h>

#include <speex/speex_echo.h>
#include <speex/speex_preprocess.h>

namespace {

constexpr int kMaxDelayMs = 500;
constexpr int kDefaultSpeexFilterMs = 100;
// The speex reference is held back by the delay minus this much, so that the direct path lands
// inside the adaptive filter even when the estimate is a little late.
constexpr int kSpeexDelayMarginMs = 10;
// Blocks whose reference is louder than this count as "reference active".
constexpr double kFarActiveDbfs = -50.0;
// Smoothing of the ERLE powers: about 2 s of active 10 ms blocks.
constexpr double kErleSmoothing = 1.0 / 200.0;

void set_error(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

inline int16_t to_s16(float v) {
    float s = v * 32768.0f;
    if (s >= 32767.0f) return 32767;
    if (s <= -32768.0f) return -32768;
    return static_cast<int16_t>(std::lrintf(s));
}

double block_power(const int16_t *x, size_t n) {
    double acc = 0.0;
    for (size_t i = 0; i < n; i++) acc += double(x[i]) * double(x[i]);
    return acc / double(n ? n : 1) / (32768.0 * 32768.0);
}

double to_db(double p) { return 10.0 * std::log10(p + 1e-20); }

// In-place iterative radix-2 FFT of a fixed power-of-two size.
class FFT {
public:
    explicit FFT(int n) : n_(n), rev_(n), tw_(n / 2) {
        int bits = 0;
        while ((1 << bits) < n) bits++;
        for (int i = 0; i < n; i++) {
            int r = 0;
            for (int b = 0; b < bits; b++) r |= ((i >> b) & 1) << (bits - 1 - b);
            rev_[i] = r;
        }
        const double pi = 3.14159265358979323846;
        for (int k = 0; k < n / 2; k++) tw_[k] = std::polar(1.0f, float(-2.0 * pi * k / n));
    }

    void forward(std::vector<std::complex<float>> &x) const { run(x, false); }
    void inverse(std::vector<std::complex<float>> &x) const { run(x, true); }  // unscaled

private:
    void run(std::vector<std::complex<float>> &x, bool inv) const {
        for (int i = 0; i < n_; i++)
            if (i < rev_[i]) std::swap(x[i], x[rev_[i]]);
        for (int len = 2; len <= n_; len <<= 1) {
            const int half = len / 2, step = n_ / len;
            for (int i = 0; i < n_; i += len)
                for (int j = 0; j < half; j++) {
                    std::complex<float> w = tw_[j * step];
                    if (inv) w = std::conj(w);
                    std::complex<float> u = x[i + j], v = x[i + j + half] * w;
                    x[i + j] = u + v;
                    x[i + j + half] = u - v;
                }
        }
    }

    int n_;
    std::vector<int> rev_;
    std::vector<std::complex<float>> tw_;
};

// Estimates how late the reference shows up in the microphone signal: GCC-PHAT (phase transform,
// 200-3600 Hz) between the last second of microphone and the last 1.5 s of reference, both
// decimated to 8 kHz, every 250 ms while the reference is active. A new value is taken when
// consecutive confident estimates agree, so near-end speech and silence do not move it.
class DelayEstimator {
public:
    static constexpr int kRate = 8000;
    static constexpr int kWin = kRate;                         // 1 s of microphone
    static constexpr int kMaxLag = kRate * kMaxDelayMs / 1000;  // 0.5 s
    static constexpr int kHist = kWin + kMaxLag;
    static constexpr int kN = 16384;                           // >= kHist, no circular wrap for lags 0...kMaxLag
    static constexpr int kEvery = kRate / 4;                   // estimate every 250 ms
    static constexpr double kConfidence = 7.0;                 // peak / mean |correlation|
    static constexpr int kAgree = kRate * 2 / 1000;            // estimates within 2 ms agree

    DelayEstimator() : fft_(kN), near_(kWin, 0.0f), far_(kHist, 0.0f), a_(kN), b_(kN) {}

    void init(int rate, int channels) {
        factor_ = rate / kRate;
        channels_ = channels;
        reset();
    }

    void reset() {
        std::fill(near_.begin(), near_.end(), 0.0f);
        std::fill(far_.begin(), far_.end(), 0.0f);
        far_active_.clear();
        pos_ = 0;
        since_ = 0;
        current_ = -1;
        recent_.clear();
    }

    // One block of interleaved samples (frames per channel).
    void push(const int16_t *near, const int16_t *far, int frames) {
        const int out = frames / factor_;
        const float scale = 1.0f / (32768.0f * float(factor_ * channels_));
        for (int i = 0; i < out; i++) {
            float sn = 0.0f, sf = 0.0f;
            for (int k = 0; k < factor_; k++)
                for (int c = 0; c < channels_; c++) {
                    const size_t idx = size_t(i * factor_ + k) * channels_ + c;
                    sn += near[idx];
                    if (far) sf += far[idx];
                }
            near_[pos_ % kWin] = sn * scale;
            far_[pos_ % kHist] = sf * scale;
            pos_++;
        }
        const double pf = far ? block_power(far, size_t(frames) * channels_) : 0.0;
        far_active_.push_back(to_db(pf) > kFarActiveDbfs);
        if (far_active_.size() > size_t(kHist / out)) far_active_.pop_front();
        since_ += out;
        if (since_ >= kEvery && pos_ >= size_t(kWin)) {
            since_ = 0;
            estimate();
        }
    }

    // Delay in samples at 8 kHz, -1 while unknown.
    int current() const { return current_; }

private:
    void estimate() {
        size_t active = 0;
        for (bool b : far_active_) active += b;
        if (far_active_.empty() || double(active) / double(far_active_.size()) < 0.3) return;

        // a = reference over the last kHist samples, b = microphone over the last kWin samples.
        std::fill(a_.begin(), a_.end(), std::complex<float>(0.0f, 0.0f));
        std::fill(b_.begin(), b_.end(), std::complex<float>(0.0f, 0.0f));
        for (int i = 0; i < kHist; i++) a_[i] = far_[(pos_ + i) % kHist];  // oldest first
        for (int i = 0; i < kWin; i++) b_[i] = near_[(pos_ + i) % kWin];
        fft_.forward(a_);
        fft_.forward(b_);
        const int lo = 200 * kN / kRate, hi = 3600 * kN / kRate;
        for (int k = 0; k < kN; k++) {
            const int f = k <= kN / 2 ? k : kN - k;
            if (f < lo || f > hi) {
                a_[k] = 0.0f;
                continue;
            }
            std::complex<float> c = a_[k] * std::conj(b_[k]);
            const float m = std::abs(c);
            a_[k] = m > 1e-20f ? c / m : std::complex<float>(0.0f, 0.0f);
        }
        fft_.inverse(a_);
        // c[j] = sum_n far[n + j] * near[n]; the echo of far[m] appears kMaxLag - j samples later.
        int best = 0;
        float peak = -1e30f;
        double mean = 0.0;
        for (int j = 0; j <= kMaxLag; j++) {
            const float v = a_[j].real();
            mean += std::fabs(v);
            if (v > peak) {
                peak = v;
                best = j;
            }
        }
        mean /= double(kMaxLag + 1);
        if (mean <= 0.0 || peak / mean < kConfidence) return;
        const int delay = kMaxLag - best;

        recent_.push_back(delay);
        if (recent_.size() > 3) recent_.erase(recent_.begin());
        const size_t need = current_ < 0 ? 2 : 3;
        if (recent_.size() < need) return;
        const auto first = recent_.end() - need;
        const auto mm = std::minmax_element(first, recent_.end());
        if (*mm.second - *mm.first > kAgree) return;
        std::vector<int> v(first, recent_.end());
        std::sort(v.begin(), v.end());
        const int agreed = v[v.size() / 2];
        if (current_ < 0 || std::abs(agreed - current_) > kAgree) current_ = agreed;
    }

    FFT fft_;
    int factor_ = 2, channels_ = 1;
    std::vector<float> near_, far_;
    std::deque<bool> far_active_;
    std::vector<std::complex<float>> a_, b_;
    size_t pos_ = 0;
    int since_ = 0;
    int current_ = -1;
    std::vector<int> recent_;
};

}  // namespace

struct vp_aec {
    int engine = VP_AEC_WEBRTC;
    int rate = 16000;
    int channels = 1;
    int frame = 160;  // frames per channel per call
    int filter_ms = 0;
    std::atomic<int> hint_delay_ms{0};  // used until the estimator settles (always when it is off)
    std::atomic<bool> estimate_delay{true};
    DelayEstimator estimator;
    int delay_in_use_ms = 0;
    bool delay_from_estimator = false;

    // webrtc
    webrtc::AudioProcessing *apm = nullptr;
    std::vector<std::vector<float>> near_f, far_f, out_f;
    std::vector<float *> near_p, far_p, out_p;

    // speex
    SpeexEchoState *echo = nullptr;
    SpeexPreprocessState *pre = nullptr;
    std::vector<int16_t> far_ring;  // bulk delay line for the reference (mono)
    size_t ring_pos = 0;
    int bulk_samples = 0;
    std::vector<int16_t> far_delayed, speex_out;
    int speex_suppression = 2;
    int speex_noise = 0;

    // statistics
    uint64_t frames = 0;
    double p_near = 0.0, p_out = 0.0, p_far = 0.0;
    bool have_erle = false;
    bool echo_likely = false;

    ~vp_aec() {
        delete apm;
        if (pre) speex_preprocess_state_destroy(pre);
        if (echo) speex_echo_state_destroy(echo);
    }
};

namespace {

bool webrtc_setup(vp_aec *a, char *err, size_t errlen) {
    webrtc::Config config;
    // The normal filter covers 48 ms at 16 kHz after the stream delay; the extended one covers
    // 128 ms and has a more aggressive suppressor (worse double talk), so it is only used when
    // asked for with filter_ms > 64.
    config.Set<webrtc::ExtendedFilter>(new webrtc::ExtendedFilter(a->filter_ms > 64));
    // The library's delay-agnostic mode would ignore the delay we report (our estimate, or the
    // caller's) and find its own, which measured much slower for delays above the filter length
    // (ERLE 3 dB instead of 36 dB in the first 9 s at 150 ms); it stays off.
    config.Set<webrtc::DelayAgnostic>(new webrtc::DelayAgnostic(false));
    config.Set<webrtc::ExperimentalAgc>(new webrtc::ExperimentalAgc(false));
    config.Set<webrtc::ExperimentalNs>(new webrtc::ExperimentalNs(false));

    a->apm = webrtc::AudioProcessing::Create(config);
    if (!a->apm) {
        set_error(err, errlen, "webrtc: AudioProcessing::Create failed");
        return false;
    }
    webrtc::StreamConfig sc(a->rate, a->channels, false);
    webrtc::ProcessingConfig pc = {{sc, sc, sc, sc}};
    int rc = a->apm->Initialize(pc);
    if (rc != webrtc::AudioProcessing::kNoError) {
        set_error(err, errlen, "webrtc: Initialize(%d Hz, %d ch) failed (%d)", a->rate, a->channels, rc);
        return false;
    }
    a->apm->high_pass_filter()->Enable(true);
    webrtc::EchoCancellation *ec = a->apm->echo_cancellation();
    ec->enable_drift_compensation(false);
    // Low suppression: in bench/aec-bench.py it kept the same ERLE as moderate (36-37 dB, the
    // noise floor) and let 0.09 more of the near end through in double talk.
    ec->set_suppression_level(webrtc::EchoCancellation::kLowSuppression);
    ec->enable_metrics(true);
    ec->enable_delay_logging(true);
    if ((rc = ec->Enable(true)) != webrtc::AudioProcessing::kNoError) {
        set_error(err, errlen, "webrtc: enabling the echo canceller failed (%d)", rc);
        return false;
    }
    a->apm->noise_suppression()->Enable(false);
    a->apm->gain_control()->Enable(false);
    a->apm->voice_detection()->Enable(false);
    a->apm->level_estimator()->Enable(false);

    auto alloc = [&](std::vector<std::vector<float>> &bufs, std::vector<float *> &ptrs) {
        bufs.assign(a->channels, std::vector<float>(a->frame, 0.0f));
        ptrs.resize(a->channels);
        for (int c = 0; c < a->channels; c++) ptrs[c] = bufs[c].data();
    };
    alloc(a->near_f, a->near_p);
    alloc(a->far_f, a->far_p);
    alloc(a->out_f, a->out_p);
    return true;
}

void speex_apply_suppression(vp_aec *a) {
    // Residual echo suppression lives in the preprocessor's gain stage, which only runs when
    // "denoise" is on (speexdsp ignores the computed gains otherwise); the noise floor is kept at
    // 0 dB unless noise suppression is asked for.
    static const int kEcho[4] = {0, -30, -40, -55};
    static const int kEchoActive[4] = {0, -10, -15, -25};
    static const int kNoise[5] = {0, -10, -15, -20, -25};
    spx_int32_t on = 1, off = 0;
    speex_preprocess_ctl(a->pre, SPEEX_PREPROCESS_SET_DENOISE, &on);
    speex_preprocess_ctl(a->pre, SPEEX_PREPROCESS_SET_AGC, &off);
    speex_preprocess_ctl(a->pre, SPEEX_PREPROCESS_SET_DEREVERB, &off);
    spx_int32_t noise = kNoise[a->speex_noise];
    speex_preprocess_ctl(a->pre, SPEEX_PREPROCESS_SET_NOISE_SUPPRESS, &noise);
    spx_int32_t es = kEcho[a->speex_suppression], esa = kEchoActive[a->speex_suppression];
    speex_preprocess_ctl(a->pre, SPEEX_PREPROCESS_SET_ECHO_SUPPRESS, &es);
    speex_preprocess_ctl(a->pre, SPEEX_PREPROCESS_SET_ECHO_SUPPRESS_ACTIVE, &esa);
    speex_preprocess_ctl(a->pre, SPEEX_PREPROCESS_SET_ECHO_STATE, a->speex_suppression > 0 ? a->echo : nullptr);
}

bool speex_setup(vp_aec *a, char *err, size_t errlen) {
    if (a->channels != 1) {
        set_error(err, errlen, "speex: only mono is supported (got %d channels)", a->channels);
        return false;
    }
    const int filter_ms = a->filter_ms > 0 ? a->filter_ms : kDefaultSpeexFilterMs;
    const int taps = filter_ms * a->rate / 1000;
    a->echo = speex_echo_state_init(a->frame, taps);
    if (!a->echo) {
        set_error(err, errlen, "speex: speex_echo_state_init(%d, %d) failed", a->frame, taps);
        return false;
    }
    spx_int32_t rate = a->rate;
    speex_echo_ctl(a->echo, SPEEX_ECHO_SET_SAMPLING_RATE, &rate);
    a->pre = speex_preprocess_state_init(a->frame, a->rate);
    if (!a->pre) {
        set_error(err, errlen, "speex: speex_preprocess_state_init failed");
        return false;
    }
    speex_apply_suppression(a);
    a->far_ring.assign(size_t(kMaxDelayMs) * a->rate / 1000 + a->frame, 0);
    a->ring_pos = 0;
    a->far_delayed.assign(a->frame, 0);
    a->speex_out.assign(a->frame, 0);
    return true;
}

// The delay to use for this block: the estimate once there is one (unless estimation is off),
// else the caller's value (default 0).
void update_delay(vp_aec *a) {
    const int est = a->estimate_delay.load(std::memory_order_relaxed) ? a->estimator.current() : -1;
    a->delay_from_estimator = est >= 0;
    a->delay_in_use_ms = est >= 0 ? (est * 1000 + DelayEstimator::kRate / 2) / DelayEstimator::kRate
                                   : a->hint_delay_ms.load(std::memory_order_relaxed);
}

void update_stats(vp_aec *a, const int16_t *near, const int16_t *far, const int16_t *out) {
    const size_t n = size_t(a->frame) * a->channels;
    const double pn = block_power(near, n);
    const double po = block_power(out, n);
    const double pf = far ? block_power(far, n) : 0.0;
    a->frames++;
    a->p_far = a->frames == 1 ? pf : 0.95 * a->p_far + 0.05 * pf;
    if (to_db(pf) > kFarActiveDbfs) {
        if (!a->have_erle) {
            a->p_near = pn;
            a->p_out = po;
            a->have_erle = true;
        } else {
            a->p_near += kErleSmoothing * (pn - a->p_near);
            a->p_out += kErleSmoothing * (po - a->p_out);
        }
    }
}

int process_webrtc(vp_aec *a, const int16_t *near, const int16_t *far, int16_t *out) {
    const int ch = a->channels, n = a->frame;
    const float scale = 1.0f / 32768.0f;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < ch; c++) {
            a->near_f[c][i] = near[i * ch + c] * scale;
            a->far_f[c][i] = far ? far[i * ch + c] * scale : 0.0f;
        }
    webrtc::StreamConfig sc(a->rate, ch, false);
    int rc = a->apm->ProcessReverseStream(a->far_p.data(), sc, sc, a->far_p.data());
    if (rc != webrtc::AudioProcessing::kNoError) return -1;
    a->apm->set_stream_delay_ms(a->delay_in_use_ms);
    rc = a->apm->ProcessStream(a->near_p.data(), sc, sc, a->out_p.data());
    // kBadStreamParameterWarning only says the delay was clamped; the frame was processed.
    if (rc != webrtc::AudioProcessing::kNoError && rc != webrtc::AudioProcessing::kBadStreamParameterWarning)
        return -2;
    for (int i = 0; i < n; i++)
        for (int c = 0; c < ch; c++) out[i * ch + c] = to_s16(a->out_f[c][i]);
    a->echo_likely = a->apm->echo_cancellation()->stream_has_echo();
    return 0;
}

int process_speex(vp_aec *a, const int16_t *near, const int16_t *far, int16_t *out) {
    const int n = a->frame;
    const size_t cap = a->far_ring.size();
    const int bulk_ms = std::max(a->delay_in_use_ms - kSpeexDelayMarginMs, 0);
    const int bulk = bulk_ms * a->rate / 1000;
    // A new delay shifts the reference; the filter re-adapts to the shifted path (resetting it
    // instead measured worse: speex restarts its slow initial convergence).
    a->bulk_samples = bulk;
    // Write the new reference block, then read the block `bulk` samples older.
    for (int i = 0; i < n; i++) a->far_ring[(a->ring_pos + i) % cap] = far ? far[i] : 0;
    const size_t start = (a->ring_pos + cap - size_t(bulk)) % cap;
    for (int i = 0; i < n; i++) a->far_delayed[i] = a->far_ring[(start + i) % cap];
    a->ring_pos = (a->ring_pos + n) % cap;

    speex_echo_cancellation(a->echo, near, a->far_delayed.data(), a->speex_out.data());
    if (a->speex_suppression > 0 || a->speex_noise > 0) speex_preprocess_run(a->pre, a->speex_out.data());
    std::memcpy(out, a->speex_out.data(), sizeof(int16_t) * n);
    a->echo_likely = to_db(block_power(a->far_delayed.data(), n)) > kFarActiveDbfs;
    return 0;
}

}  // namespace

extern "C" {

vp_aec *vp_aec_create(int sample_rate, int channels, int engine, int filter_ms, char *err, size_t errlen) {
    if (sample_rate != 16000 && sample_rate != 32000 && sample_rate != 48000) {
        set_error(err, errlen, "unsupported sample rate %d (16000, 32000 or 48000)", sample_rate);
        return nullptr;
    }
    if (channels < 1 || channels > 2) {
        set_error(err, errlen, "unsupported channel count %d (1 or 2)", channels);
        return nullptr;
    }
    if (engine != VP_AEC_WEBRTC && engine != VP_AEC_SPEEX) {
        set_error(err, errlen, "unknown engine %d (0 webrtc, 1 speex)", engine);
        return nullptr;
    }
    if (filter_ms < 0 || filter_ms > 1000) {
        set_error(err, errlen, "filter_ms %d out of range 0...1000", filter_ms);
        return nullptr;
    }
    std::unique_ptr<vp_aec> a;
    try {
        a.reset(new vp_aec());
        a->engine = engine;
        a->rate = sample_rate;
        a->channels = channels;
        a->frame = sample_rate / 100;
        a->filter_ms = filter_ms;
        a->estimator.init(sample_rate, channels);
        bool ok = engine == VP_AEC_WEBRTC ? webrtc_setup(a.get(), err, errlen) : speex_setup(a.get(), err, errlen);
        if (!ok) return nullptr;
    } catch (const std::exception &e) {
        set_error(err, errlen, "%s", e.what());
        return nullptr;
    }
    return a.release();
}

void vp_aec_destroy(vp_aec *aec) { delete aec; }

int vp_aec_frame_size(const vp_aec *aec) { return aec ? aec->frame : 0; }

int vp_aec_process(vp_aec *aec, const int16_t *near, const int16_t *far, int16_t *out, int frames) {
    if (!aec || !near || !out) return -1;
    const size_t n = size_t(aec->frame) * aec->channels;
    if (frames != aec->frame) {
        if (out != near && frames > 0) std::memmove(out, near, sizeof(int16_t) * size_t(frames) * aec->channels);
        return -3;
    }
    // Keep the input for the statistics when processing in place.
    int16_t near_copy[960];  // 10 ms of 48 kHz stereo
    const int16_t *near_in = near;
    if (out == near) {
        std::memcpy(near_copy, near, sizeof(int16_t) * n);
        near_in = near_copy;
    }
    if (aec->estimate_delay.load(std::memory_order_relaxed)) aec->estimator.push(near_in, far, frames);
    update_delay(aec);
    int rc = aec->engine == VP_AEC_WEBRTC ? process_webrtc(aec, near_in, far, out)
                                          : process_speex(aec, near_in, far, out);
    if (rc != 0) {
        std::memcpy(out, near_in, sizeof(int16_t) * n);
        return rc;
    }
    update_stats(aec, near_in, far, out);
    return 0;
}

void vp_aec_set_delay_ms(vp_aec *aec, int delay_ms) {
    if (!aec) return;
    aec->hint_delay_ms.store(std::min(std::max(delay_ms, 0), kMaxDelayMs), std::memory_order_relaxed);
}

void vp_aec_set_delay_estimation(vp_aec *aec, int enabled) {
    if (!aec) return;
    aec->estimate_delay.store(enabled != 0, std::memory_order_relaxed);
}

int vp_aec_set_noise_suppression(vp_aec *aec, int level) {
    if (!aec || level < 0 || level > 4) return -1;
    if (aec->engine == VP_AEC_WEBRTC) {
        webrtc::NoiseSuppression *ns = aec->apm->noise_suppression();
        if (level == 0) return ns->Enable(false) == 0 ? 0 : -2;
        static const webrtc::NoiseSuppression::Level kLevels[4] = {
            webrtc::NoiseSuppression::kLow, webrtc::NoiseSuppression::kModerate,
            webrtc::NoiseSuppression::kHigh, webrtc::NoiseSuppression::kVeryHigh};
        if (ns->set_level(kLevels[level - 1]) != 0) return -2;
        return ns->Enable(true) == 0 ? 0 : -2;
    }
    aec->speex_noise = level;
    speex_apply_suppression(aec);
    return 0;
}

int vp_aec_set_suppression(vp_aec *aec, int level) {
    if (!aec) return -1;
    if (aec->engine == VP_AEC_WEBRTC) {
        if (level < 0 || level > 2) return -1;
        return aec->apm->echo_cancellation()->set_suppression_level(
                   static_cast<webrtc::EchoCancellation::SuppressionLevel>(level)) == 0 ? 0 : -2;
    }
    if (level < 0 || level > 3) return -1;
    aec->speex_suppression = level;
    speex_apply_suppression(aec);
    return 0;
}

int vp_aec_get_stats(vp_aec *aec, vp_aec_stats *s) {
    if (!aec || !s) return -1;
    s->frames = aec->frames;
    s->delay_ms = aec->delay_in_use_ms;
    s->delay_estimated = aec->delay_from_estimator ? 1 : 0;
    s->engine_delay_ms = -1;
    s->engine_erle_db = NAN;
    s->echo_likely = aec->echo_likely ? 1 : 0;
    s->erle_db = aec->have_erle ? to_db(aec->p_near) - to_db(aec->p_out) : NAN;
    s->far_level_dbfs = to_db(aec->p_far);
    if (aec->engine == VP_AEC_WEBRTC) {
        webrtc::EchoCancellation *ec = aec->apm->echo_cancellation();
        webrtc::EchoCancellation::Metrics m;
        if (ec->GetMetrics(&m) == 0 && m.echo_return_loss_enhancement.average > -100)
            s->engine_erle_db = m.echo_return_loss_enhancement.average;
        int median = -1, std_dev = -1;
        float poor = 0.0f;
        if (ec->GetDelayMetrics(&median, &std_dev, &poor) == 0 && median >= 0) s->engine_delay_ms = median;
    }
    return 0;
}

void vp_aec_reset(vp_aec *aec) {
    if (!aec) return;
    if (aec->engine == VP_AEC_WEBRTC) {
        aec->apm->Initialize();
    } else {
        speex_echo_state_reset(aec->echo);
        std::fill(aec->far_ring.begin(), aec->far_ring.end(), 0);
    }
    aec->estimator.reset();
    update_delay(aec);
    aec->have_erle = false;
    aec->p_near = aec->p_out = 0.0;
}

const char *vp_aec_engine_name(const vp_aec *aec) {
    if (!aec) return "";
    return aec->engine == VP_AEC_WEBRTC ? "webrtc" : "speex";
}

}  // extern "C"
