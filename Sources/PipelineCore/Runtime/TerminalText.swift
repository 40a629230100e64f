/// Text from peers and files made safe for a terminal: control characters (C0 except newline and
/// tab, DEL, C1) and bidirectional overrides are written as `\u{XX}` escapes, so a server's error
/// message or a chunk id cannot move the cursor, recolour the screen or reverse what a user reads.
public enum TerminalText {
    /// `text` with every character a terminal would act on escaped.
    public static func escape(_ text: String, keepNewlines: Bool = true) -> String {
        guard text.unicodeScalars.contains(where: { needsEscape($0, keepNewlines: keepNewlines) }) else { return text }
        var out = ""
        out.unicodeScalars.reserveCapacity(text.unicodeScalars.count + 16)
        for u in text.unicodeScalars {
            if needsEscape(u, keepNewlines: keepNewlines) {
                out += "\\u{" + String(u.value, radix: 16, uppercase: true) + "}"
            } else {
                out.unicodeScalars.append(u)
            }
        }
        return out
    }

    static func needsEscape(_ u: Unicode.Scalar, keepNewlines: Bool) -> Bool {
        switch u.value {
        case 0x0A, 0x09: return !keepNewlines
        case 0x00...0x1F, 0x7F...0x9F: return true
        case 0x200E, 0x200F, 0x061C, 0x202A...0x202E, 0x2066...0x2069: return true
        default: return false
        }
    }
}
