/// Which letters a voice can say, by the writing system of its language: a voice reads its own script
/// and Latin (eSpeak NG reads Latin words in every language); a letter of another script (Chinese in
/// an English sentence) would be read as its name ("Chinese letter"), so it is taken out and named.
/// A pure function of the text.
enum SpeechScripts {
    typealias Ranges = [ClosedRange<UInt32>]

    static let latin: Ranges = [0x41...0x5A, 0x61...0x7A, 0xAA...0xAA, 0xB5...0xB5, 0xBA...0xBA, 0xC0...0x24F, 0x250...0x2AF,
                                0x1D00...0x1DBF, 0x1E00...0x1EFF, 0x2C60...0x2C7F, 0xA720...0xA7FF, 0xFF21...0xFF3A, 0xFF41...0xFF5A]
    static let scripts: [String: Ranges] = [
        "cyrillic": [0x400...0x52F, 0x1C80...0x1C8F, 0x2DE0...0x2DFF, 0xA640...0xA69F],
        "greek": [0x370...0x3FF, 0x1F00...0x1FFF],
        "arabic": [0x600...0x6FF, 0x750...0x77F, 0x8A0...0x8FF, 0xFB50...0xFDFF, 0xFE70...0xFEFF],
        "hebrew": [0x590...0x5FF, 0xFB1D...0xFB4F],
        "devanagari": [0x900...0x97F, 0xA8E0...0xA8FF],
        "bengali": [0x980...0x9FF], "gurmukhi": [0xA00...0xA7F], "gujarati": [0xA80...0xAFF], "oriya": [0xB00...0xB7F],
        "tamil": [0xB80...0xBFF], "telugu": [0xC00...0xC7F], "kannada": [0xC80...0xCFF], "malayalam": [0xD00...0xD7F],
        "sinhala": [0xD80...0xDFF], "thai": [0xE00...0xE7F], "lao": [0xE80...0xEFF], "myanmar": [0x1000...0x109F],
        "georgian": [0x10A0...0x10FF, 0x2D00...0x2D2F], "armenian": [0x530...0x58F], "ethiopic": [0x1200...0x139F],
        "hangul": [0x1100...0x11FF, 0x3130...0x318F, 0xAC00...0xD7AF],
        "han": [0x2E80...0x2FDF, 0x3005...0x3007, 0x3021...0x3029, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xF900...0xFAFF, 0x20000...0x2FA1F],
        "kana": [0x3040...0x30FF, 0x31F0...0x31FF, 0xFF66...0xFF9F],
    ]
    /// Languages (the first part of an espeak voice or a language code) by script; languages not
    /// listed are written in Latin.
    static let languages: [String: [String]] = [
        "cyrillic": ["ru", "uk", "bg", "be", "mk", "sr", "kk", "ky", "mn", "tt", "ba", "cv", "tg"],
        "greek": ["el", "grc"], "arabic": ["ar", "fa", "ur", "ps", "sd", "ug", "ku"], "hebrew": ["he", "yi"],
        "devanagari": ["hi", "mr", "ne", "sa", "kok", "mai", "bho"], "bengali": ["bn", "as", "bpy"], "gurmukhi": ["pa"],
        "gujarati": ["gu"], "oriya": ["or"], "tamil": ["ta"], "telugu": ["te"], "kannada": ["kn"], "malayalam": ["ml"],
        "sinhala": ["si"], "thai": ["th"], "lao": ["lo"], "myanmar": ["my"], "georgian": ["ka"], "armenian": ["hy", "hyw"],
        "ethiopic": ["am", "ti"], "hangul": ["ko"], "han": ["cmn", "yue", "zh", "hak", "ja"], "kana": ["ja"],
    ]

    /// The letters a voice for `language` (`en-us`, `en_US`, `cmn`, `gmw/en-US`) can say.
    static func ranges(language: String) -> Ranges {
        let code = String(language.split(separator: "/").last ?? "").lowercased()
            .split(whereSeparator: { $0 == "-" || $0 == "_" || $0 == "+" }).first.map(String.init) ?? ""
        var ranges = latin
        for (script, codes) in languages where codes.contains(code) { ranges += scripts[script] ?? [] }
        if code == "ja" || code == "cmn" || code == "yue" || code == "zh" { ranges += scripts["han"] ?? [] }
        return ranges
    }

    /// `text` with the letters outside `ranges` replaced by spaces, and those letters (in order).
    /// Control characters become spaces and format characters (soft hyphens, zero-width joiners) are
    /// dropped; neither is reported: they are not text.
    static func sayable(_ text: String, ranges: Ranges) -> (text: String, skipped: String) {
        var out = ""
        var skipped = ""
        out.reserveCapacity(text.utf8.count)
        for c in text {
            if c.unicodeScalars.contains(where: { $0.properties.generalCategory == .control }) {
                out.append(" ")
                continue
            }
            if c.unicodeScalars.allSatisfy({ $0.properties.generalCategory == .format }) { continue }
            guard c.isLetter, let scalar = c.unicodeScalars.first else {
                out.append(c)
                continue
            }
            if ranges.contains(where: { $0.contains(scalar.value) }) {
                out.append(c)
            } else {
                skipped.append(c)
                out.append(" ")
            }
        }
        return (out, skipped)
    }
}
