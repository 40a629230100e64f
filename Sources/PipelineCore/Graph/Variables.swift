import Yams

/// `${VAR}` and `${VAR:-default}` in a graph or a serve configuration, substituted into scalar values
/// after parsing: a variable's value is never read as YAML, so whatever it holds (quotes, commas, colons,
/// ` #`, braces, newlines) it is the text of the one scalar it lands in, and it can add no key, node or
/// link.
///
/// Before parsing, each reference is replaced in the text by a stand-in of the same length (in Unicode
/// scalars, as the parser counts columns), so every line and column the parser reports is the file's
/// own. A stand-in is made of noncharacters (U+FDD0...U+FDEF, which Unicode reserves for a program's
/// internal use): valid in any YAML scalar, plain or quoted, inside flow collections too. After parsing,
/// the stand-ins in each scalar (keys included) are replaced by the variables' values. `$$` is a
/// literal `$`.
///
/// One exception keeps graphs that pick an anchor by name working (`enc: *${CODEC:-opus}-encoder`): a
/// reference inside an alias or an anchor name (`*name`, `&name`) is substituted into the text, and
/// only when its value is a name (letters, digits, `_`, `-`, `.`), so it too can change nothing else.
public struct GraphVariables {
    /// One `${…}` in the text.
    struct Reference {
        var name: String
        var fallback: String?
        var location: SourceLocation
    }

    /// The text to parse: the file's, each reference replaced by its stand-in.
    public let text: String
    var references: [Reference] = []
    let environment: [String: String]
    let file: String
    /// References already reported as undefined (a scalar copied by an alias is resolved twice).
    private var reported: Set<Int> = []
    /// Bytes of variable values substituted so far, and whether the limit was reported.
    private var substitutedBytes = 0
    private var overLimit = false
    /// Most bytes all substituted values may add up to.
    let limit: Int

    static let marker = Unicode.Scalar(UInt32(0xFDD0))!
    static let pad = Unicode.Scalar(UInt32(0xFDD1))!
    static let firstDigit: UInt32 = 0xFDD2
    static let base: UInt32 = 30

    static func isReserved(_ u: Unicode.Scalar) -> Bool { (0xFDD0...0xFDEF).contains(u.value) }

    /// Finds the references in `source` and builds the text to parse.
    public init(_ source: String, file: String, environment: [String: String], limit: Int = GraphLoader.maximumSize,
                issues: inout [GraphIssue]) {
        self.environment = environment
        self.file = file
        self.limit = limit
        guard source.contains("$") else {
            text = source
            return
        }
        let scalars = Array(source.unicodeScalars)
        if scalars.contains(where: Self.isReserved) {
            issues.append(GraphIssue(.syntax, at: SourceLocation(file: file, line: 0, column: 0),
                                     "the text holds characters U+FDD0...U+FDEF (Unicode noncharacters), which the ${VAR} substitution reserves"))
            text = source
            return
        }
        var out = String.UnicodeScalarView()
        var line = 1, column = 1
        var i = 0
        // Spaces owed after an alias or anchor name whose value was shorter than its reference: written
        // where the name ends, so that the columns after it stay the file's.
        var owed = 0
        let separators: Set<Unicode.Scalar> = [" ", "\t", "\n", "\r", ",", "[", "]", "{", "}"]
        while i < scalars.count {
            let c = scalars[i]
            if owed > 0, separators.contains(c) {
                for _ in 0..<owed { out.append(" ") }
                owed = 0
            }
            if c == "$", i + 1 < scalars.count {
                if scalars[i + 1] == "$" {
                    // Kept as written; a scalar's `$$` becomes `$` when its references are substituted.
                    out.append("$"); out.append("$")
                    i += 2; column += 2
                    continue
                }
                if scalars[i + 1] == "{", let close = Self.closingBrace(scalars, from: i + 2) {
                    let body = String(String.UnicodeScalarView(scalars[(i + 2)..<close]))
                    let name: String, fallback: String?
                    if let r = body.range(of: ":-") {
                        name = String(body[..<r.lowerBound]); fallback = String(body[r.upperBound...])
                    } else {
                        name = body; fallback = nil
                    }
                    let length = close - i + 1
                    let reference = Reference(name: name, fallback: fallback, location: SourceLocation(file: file, line: line, column: column))
                    if Self.inAnchorName(scalars, at: i) {
                        let value = Self.value(of: reference, in: environment, issues: &issues) ?? ""
                        if value.isEmpty || !value.unicodeScalars.allSatisfy(Self.isNameCharacter) {
                            issues.append(GraphIssue(.undefinedVariable, at: reference.location,
                                                     "${\(name)} is part of an alias or anchor name (*name, &name): its value must be a name of letters, digits, '_', '-' or '.', got '\(value)'"))
                            out.append(contentsOf: "invalid".unicodeScalars)
                        } else {
                            out.append(contentsOf: value.unicodeScalars)
                            owed += max(0, length - value.unicodeScalars.count)
                        }
                    } else {
                        let index = references.count
                        references.append(reference)
                        guard let standIn = Self.standIn(index, length: length) else {
                            issues.append(GraphIssue(.undefinedVariable, at: reference.location,
                                                     "too many ${VAR} references (more than \(Int(Self.pow30(length - 1))) of \(length) characters)"))
                            out.append(contentsOf: scalars[i...close])
                            i = close + 1; column += length
                            continue
                        }
                        out.append(contentsOf: standIn)
                    }
                    i = close + 1
                    column += length
                    continue
                }
            }
            out.append(c)
            if c == "\n" { line += 1; column = 1 } else { column += 1 }
            i += 1
        }
        for _ in 0..<owed { out.append(" ") }
        text = String(out)
    }

    /// The `}` closing a reference that starts at `from`, on the same line.
    static func closingBrace(_ s: [Unicode.Scalar], from: Int) -> Int? {
        var j = from
        while j < s.count {
            if s[j] == "}" { return j }
            if s[j] == "\n" || s[j] == "\r" { return nil }
            j += 1
        }
        return nil
    }

    /// True when the `$` at `i` is inside an alias or anchor name: its token (back to a space or a flow
    /// indicator) starts with `*` or `&`, and that token stands where a value or an entry starts.
    static func inAnchorName(_ s: [Unicode.Scalar], at i: Int) -> Bool {
        let separators: Set<Unicode.Scalar> = [" ", "\t", "\n", "\r", ",", "[", "]", "{", "}"]
        var k = i - 1
        while k >= 0, !separators.contains(s[k]) { k -= 1 }
        let start = k + 1
        guard start < i, s[start] == "*" || s[start] == "&" else { return false }
        var p = start - 1
        while p >= 0, s[p] == " " || s[p] == "\t" { p -= 1 }
        return p < 0 || [":", "-", "[", "{", ",", "?", "\n", "\r"].contains(s[p])
    }

    static func isNameCharacter(_ u: Unicode.Scalar) -> Bool {
        ("a"..."z").contains(u) || ("A"..."Z").contains(u) || ("0"..."9").contains(u) || u == "_" || u == "-" || u == "."
    }

    static func pow30(_ n: Int) -> Double {
        var r = 1.0
        for _ in 0..<max(0, n) { r *= Double(base) }
        return r
    }

    /// The stand-in for reference `index`: the marker, the index in base 30, padding; `length` scalars
    /// in all. Nil when the index does not fit.
    static func standIn(_ index: Int, length: Int) -> [Unicode.Scalar]? {
        var digits: [Unicode.Scalar] = []
        var k = UInt32(index)
        repeat {
            digits.append(Unicode.Scalar(firstDigit + k % base)!)
            k /= base
        } while k > 0
        guard digits.count <= length - 1 else { return nil }
        return [marker] + digits.reversed() + Array(repeating: pad, count: length - 1 - digits.count)
    }

    /// A reference's value: the variable's (unless empty with a default given), else the default; nil
    /// (and an issue) when there is neither.
    static func value(of r: Reference, in environment: [String: String], issues: inout [GraphIssue]) -> String? {
        if let v = environment[r.name], !(v.isEmpty && r.fallback != nil) { return v }
        if let fallback = r.fallback { return fallback }
        issues.append(GraphIssue(.undefinedVariable, at: r.location,
                                 "environment variable \(r.name) is not set and has no default (write ${\(r.name):-default})"))
        return nil
    }

    /// True when `s` holds a reference's stand-in or a `$$`.
    public func needsSubstitution(_ s: String) -> Bool {
        !references.isEmpty && s.unicodeScalars.contains(where: Self.isReserved) || s.contains("$$")
    }

    /// `s` with its stand-ins replaced by the variables' values and `$$` by `$`.
    public mutating func substitute(_ s: String, issues: inout [GraphIssue]) -> String {
        guard needsSubstitution(s) else { return s }
        let u = Array(s.unicodeScalars)
        var out = String.UnicodeScalarView()
        var i = 0
        while i < u.count {
            if u[i] == "$", i + 1 < u.count, u[i + 1] == "$" {
                out.append("$"); i += 2
                continue
            }
            guard u[i] == Self.marker else {
                out.append(u[i]); i += 1
                continue
            }
            i += 1
            var index = 0
            while i < u.count, u[i].value >= Self.firstDigit, u[i].value < Self.firstDigit + Self.base {
                index = index * Int(Self.base) + Int(u[i].value - Self.firstDigit)
                i += 1
            }
            while i < u.count, u[i] == Self.pad { i += 1 }
            guard index < references.count else { continue }
            let r = references[index]
            var value: String
            if reported.contains(index) {
                value = ""
            } else if let v = Self.value(of: r, in: environment, issues: &issues) {
                value = v
            } else {
                reported.insert(index)
                value = ""
            }
            substitutedBytes += value.utf8.count
            if substitutedBytes > limit {
                if !overLimit {
                    overLimit = true
                    issues.append(GraphIssue(.syntax, at: r.location,
                                             "the values of ${VAR} references add up to more than \(limit) bytes; refusing them"))
                }
                value = ""
            }
            out.append(contentsOf: value.unicodeScalars)
        }
        return String(out)
    }

    /// `node` with every scalar (keys too) substituted. Two keys of one mapping that become equal are
    /// reported; the later is left out.
    mutating func substitute(_ node: Yams.Node, issues: inout [GraphIssue]) -> Yams.Node {
        switch node {
        case .scalar(let s):
            guard needsSubstitution(s.string) else { return node }
            let value = substitute(s.string, issues: &issues)
            // A plain scalar is typed by what it holds now (`${RATE:-16000}` is an integer); a quoted or
            // block scalar stays a string.
            let tag = s.style == .plain ? Tag(.implicit) : Tag(.str)
            return .scalar(Yams.Node.Scalar(value, tag, s.style, s.mark))
        case .mapping(let m):
            var pairs: [(Yams.Node, Yams.Node)] = []
            // Key text → whether it held a reference.
            var seen: [String: Bool] = [:]
            for (k, v) in m {
                let hadReference = k.scalar.map { needsSubstitution($0.string) } ?? false
                let key = substitute(k, issues: &issues)
                if let name = key.scalar?.string {
                    if let earlier = seen[name], hadReference || earlier {
                        issues.append(GraphIssue(.duplicateID, at: SourceLocation(file: file, line: k.mark?.line ?? 0, column: k.mark?.column ?? 0),
                                                 "duplicate key '\(name)' once ${VAR} is substituted (each node id and parameter may appear once)"))
                        continue
                    }
                    seen[name] = hadReference
                }
                pairs.append((key, substitute(v, issues: &issues)))
            }
            return .mapping(Yams.Node.Mapping(pairs, m.tag, m.style, m.mark))
        case .sequence(let q):
            return .sequence(Yams.Node.Sequence(q.map { substitute($0, issues: &issues) }, q.tag, q.style, q.mark))
        case .alias:
            return node
        }
    }
}
