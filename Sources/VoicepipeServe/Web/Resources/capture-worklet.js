// Runs in the audio thread: mixes the microphone to mono, converts it to 16 kHz by averaging the input
// samples that fall in each output sample's span (a box filter, enough against aliasing for speech),
// and posts 20 ms chunks of little-endian s16 with their peak level.
class VoicepipeCapture extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.rate = (options.processorOptions && options.processorOptions.targetRate) || 16000;
    this.step = sampleRate / this.rate;      // input samples per output sample
    this.chunk = new Int16Array(this.rate / 50);
    this.filled = 0;
    this.acc = 0;
    this.count = 0;
    this.pos = 0;                            // input position inside the current output sample's span
    this.peak = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0) return true;
    const channels = input.length;
    const frames = input[0].length;
    for (let i = 0; i < frames; i++) {
      let x = 0;
      for (let c = 0; c < channels; c++) x += input[c][i];
      x /= channels;
      this.acc += x;
      this.count += 1;
      this.pos += 1;
      if (this.pos >= this.step) {
        this.pos -= this.step;
        const v = Math.max(-1, Math.min(1, this.acc / this.count));
        this.acc = 0;
        this.count = 0;
        const a = Math.abs(v);
        if (a > this.peak) this.peak = a;
        this.chunk[this.filled++] = v < 0 ? Math.round(v * 32768) : Math.round(v * 32767);
        if (this.filled === this.chunk.length) {
          const out = this.chunk.slice(0);
          this.port.postMessage({ pcm: out.buffer, peak: this.peak }, [out.buffer]);
          this.filled = 0;
          this.peak = 0;
        }
      }
    }
    return true;
  }
}
registerProcessor('voicepipe-capture', VoicepipeCapture);
