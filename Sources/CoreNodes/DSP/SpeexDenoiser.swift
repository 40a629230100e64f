import CSpeexDSP
import PipelineCore

/// speexdsp's preprocessor with noise suppression on and automatic gain off, on blocks of a fixed
/// size of 16 kHz mono audio: what the speex VAD analyses and what openWakeWord hears with `denoise`.
///
/// Not thread-safe: one belongs to one detector.
final class SpeexDenoiser {
    let blockSamples: Int
    private let state: OpaquePointer

    /// `code`: the error code thrown when speexdsp cannot create the state.
    init(blockSamples: Int, rate: Int = 16000, code: NodeErrorCode) throws {
        guard let s = speex_preprocess_state_init(Int32(blockSamples), Int32(rate)) else {
            throw NodeError(code, "cannot create the speexdsp preprocessor")
        }
        self.blockSamples = blockSamples
        state = s
        var on: Int32 = 1, off: Int32 = 0
        _ = speex_preprocess_ctl(state, SPEEX_PREPROCESS_SET_DENOISE, &on)
        // SPEEX_PREPROCESS_SET_VAD is not used: its yes/no decision is a crude threshold (speexdsp
        // says so on stderr); the speech probability is computed with denoise alone.
        _ = speex_preprocess_ctl(state, SPEEX_PREPROCESS_SET_AGC, &off)
    }

    deinit { speex_preprocess_state_destroy(state) }

    /// Denoises the `blockSamples` samples at `samples` in place.
    func run(_ samples: UnsafeMutablePointer<Int16>) { _ = speex_preprocess_run(state, samples) }

    /// The probability (0...100) that the last block held speech.
    var speechProbability: Int32 {
        var prob: Int32 = 0
        _ = speex_preprocess_ctl(state, SPEEX_PREPROCESS_GET_PROB, &prob)
        return prob
    }
}
