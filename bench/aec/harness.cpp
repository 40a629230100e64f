// aec-harness: runs the voicepipe echo canceller (Sources/CEchoCancel) over WAV files.
//
//   aec-harness [--engine webrtc|speex] [--filter-ms N] [--delay-ms N] [--no-estimate]
//               [--ns 0..4] [--suppression N] [--stats] NEAR.wav FAR.wav OUT.wav
//
// The echo delay is estimated from the signals; --delay-ms gives the value used until then (and
// always with --no-estimate).
// NEAR is the microphone signal, FAR the reference that was played; both 16-bit PCM with the same
// rate (16000, 32000 or 48000) and channel count. OUT gets NEAR's length and format. A FAR
// shorter than NEAR is padded with silence. --stats prints the engine's statistics as JSON on
// stderr at the end.
#include "voicepipe_aec.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Wav {
    int rate = 0;
    int channels = 0;
    std::vector<int16_t> samples;  // interleaved
};

uint32_t le32(const unsigned char *p) { return p[0] | (p[1] << 8) | (p[2] << 16) | (uint32_t(p[3]) << 24); }
uint16_t le16(const unsigned char *p) { return uint16_t(p[0] | (p[1] << 8)); }

bool read_wav(const char *path, Wav &w, std::string &err) {
    FILE *f = std::fopen(path, "rb");
    if (!f) { err = std::string(path) + ": cannot open"; return false; }
    std::vector<unsigned char> data;
    unsigned char buf[65536];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) data.insert(data.end(), buf, buf + got);
    std::fclose(f);
    if (data.size() < 12 || std::memcmp(data.data(), "RIFF", 4) || std::memcmp(data.data() + 8, "WAVE", 4)) {
        err = std::string(path) + ": not a RIFF/WAVE file"; return false;
    }
    size_t pos = 12;
    int bits = 0, format = 0;
    bool have_fmt = false;
    while (pos + 8 <= data.size()) {
        const unsigned char *h = data.data() + pos;
        uint32_t size = le32(h + 4);
        size_t body = pos + 8;
        size_t avail = std::min<size_t>(size, data.size() - body);
        if (!std::memcmp(h, "fmt ", 4) && avail >= 16) {
            format = le16(data.data() + body);
            w.channels = le16(data.data() + body + 2);
            w.rate = int(le32(data.data() + body + 4));
            bits = le16(data.data() + body + 14);
            if (format == 0xFFFE && avail >= 26) format = le16(data.data() + body + 24);
            have_fmt = true;
        } else if (!std::memcmp(h, "data", 4)) {
            if (!have_fmt) { err = std::string(path) + ": data before fmt"; return false; }
            if (format != 1 || bits != 16) { err = std::string(path) + ": not 16-bit PCM"; return false; }
            w.samples.resize(avail / 2);
            for (size_t i = 0; i < w.samples.size(); i++)
                w.samples[i] = int16_t(le16(data.data() + body + 2 * i));
            return true;
        }
        pos = body + size + (size & 1);
    }
    err = std::string(path) + ": no data chunk";
    return false;
}

void put32(std::vector<unsigned char> &o, uint32_t v) { for (int i = 0; i < 4; i++) o.push_back((v >> (8 * i)) & 0xff); }
void put16(std::vector<unsigned char> &o, uint16_t v) { o.push_back(v & 0xff); o.push_back(v >> 8); }

bool write_wav(const char *path, const Wav &w) {
    std::vector<unsigned char> o;
    const uint32_t bytes = uint32_t(w.samples.size() * 2);
    o.insert(o.end(), {'R', 'I', 'F', 'F'}); put32(o, 36 + bytes);
    o.insert(o.end(), {'W', 'A', 'V', 'E', 'f', 'm', 't', ' '}); put32(o, 16);
    put16(o, 1); put16(o, uint16_t(w.channels)); put32(o, uint32_t(w.rate));
    put32(o, uint32_t(w.rate * w.channels * 2)); put16(o, uint16_t(w.channels * 2)); put16(o, 16);
    o.insert(o.end(), {'d', 'a', 't', 'a'}); put32(o, bytes);
    for (int16_t s : w.samples) put16(o, uint16_t(s));
    FILE *f = std::fopen(path, "wb");
    if (!f) return false;
    bool ok = std::fwrite(o.data(), 1, o.size(), f) == o.size();
    return std::fclose(f) == 0 && ok;
}

int usage() {
    std::fprintf(stderr, "usage: aec-harness [--engine webrtc|speex] [--filter-ms N] [--delay-ms N] [--no-estimate] "
                         "[--ns 0..4] [--suppression N] [--stats] NEAR.wav FAR.wav OUT.wav\n");
    return 2;
}

}  // namespace

int main(int argc, char **argv) {
    int engine = VP_AEC_WEBRTC, filter_ms = 0, delay_ms = -1, ns = 0, suppression = -1;
    bool stats = false, estimate = true;
    std::vector<const char *> files;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto value = [&]() -> const char * { return i + 1 < argc ? argv[++i] : nullptr; };
        if (a == "--engine") {
            const char *v = value();
            if (!v) return usage();
            if (!std::strcmp(v, "webrtc")) engine = VP_AEC_WEBRTC;
            else if (!std::strcmp(v, "speex")) engine = VP_AEC_SPEEX;
            else { std::fprintf(stderr, "unknown engine %s\n", v); return 2; }
        } else if (a == "--filter-ms" || a == "--delay-ms" || a == "--ns" || a == "--suppression") {
            const char *v = value();
            if (!v) return usage();
            int n = std::atoi(v);
            if (a == "--filter-ms") filter_ms = n;
            else if (a == "--delay-ms") delay_ms = n;
            else if (a == "--ns") ns = n;
            else suppression = n;
        } else if (a == "--stats") {
            stats = true;
        } else if (a == "--no-estimate") {
            estimate = false;
        } else if (a == "-h" || a == "--help") {
            usage();
            return 0;
        } else if (!a.empty() && a[0] == '-') {
            return usage();
        } else {
            files.push_back(argv[i]);
        }
    }
    if (files.size() != 3) return usage();

    Wav near, far;
    std::string err;
    if (!read_wav(files[0], near, err) || !read_wav(files[1], far, err)) {
        std::fprintf(stderr, "aec-harness: %s\n", err.c_str());
        return 1;
    }
    if (near.rate != far.rate || near.channels != far.channels) {
        std::fprintf(stderr, "aec-harness: near is %d Hz/%d ch, far is %d Hz/%d ch; they must match\n",
                     near.rate, near.channels, far.rate, far.channels);
        return 1;
    }
    char msg[256] = {0};
    vp_aec *aec = vp_aec_create(near.rate, near.channels, engine, filter_ms, msg, sizeof msg);
    if (!aec) {
        std::fprintf(stderr, "aec-harness: %s\n", msg);
        return 1;
    }
    if (delay_ms >= 0) vp_aec_set_delay_ms(aec, delay_ms);
    vp_aec_set_delay_estimation(aec, estimate ? 1 : 0);
    if (ns && vp_aec_set_noise_suppression(aec, ns) != 0) { std::fprintf(stderr, "aec-harness: bad --ns\n"); return 2; }
    if (suppression >= 0 && vp_aec_set_suppression(aec, suppression) != 0) {
        std::fprintf(stderr, "aec-harness: bad --suppression\n");
        return 2;
    }

    const int frame = vp_aec_frame_size(aec);
    const size_t block = size_t(frame) * near.channels;
    const size_t total = near.samples.size();
    const size_t blocks = (total + block - 1) / block;
    std::vector<int16_t> n_in(blocks * block, 0), f_in(blocks * block, 0), out(blocks * block, 0);
    std::copy(near.samples.begin(), near.samples.end(), n_in.begin());
    std::copy(far.samples.begin(), far.samples.begin() + std::min(far.samples.size(), f_in.size()), f_in.begin());

    auto t0 = std::chrono::steady_clock::now();
    int failures = 0;
    for (size_t b = 0; b < blocks; b++) {
        if (vp_aec_process(aec, &n_in[b * block], &f_in[b * block], &out[b * block], frame) != 0) failures++;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    Wav o;
    o.rate = near.rate;
    o.channels = near.channels;
    o.samples.assign(out.begin(), out.begin() + total);
    if (!write_wav(files[2], o)) {
        std::fprintf(stderr, "aec-harness: cannot write %s\n", files[2]);
        return 1;
    }
    if (stats) {
        vp_aec_stats s;
        vp_aec_get_stats(aec, &s);
        auto num = [](double v) { return std::isnan(v) ? std::string("null") : std::to_string(v); };
        std::fprintf(stderr,
                     "{\"engine\":\"%s\",\"frames\":%llu,\"failed\":%d,\"delay_ms\":%d,\"delay_estimated\":%d,\"engine_delay_ms\":%d,\"engine_erle_db\":%s,"
                     "\"erle_db\":%s,\"far_level_dbfs\":%s,\"audio_s\":%.3f,\"cpu_s\":%.4f}\n",
                     vp_aec_engine_name(aec), (unsigned long long)s.frames, failures, s.delay_ms, s.delay_estimated, s.engine_delay_ms,
                     num(s.engine_erle_db).c_str(), num(s.erle_db).c_str(), num(s.far_level_dbfs).c_str(),
                     double(total) / near.channels / near.rate, secs);
    }
    vp_aec_destroy(aec);
    return failures ? 1 : 0;
}
