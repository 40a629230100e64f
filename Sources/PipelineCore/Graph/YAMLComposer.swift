// libyaml, as the Yams package builds it (its CYaml module), read at the level of parser events.
internal import CYaml

/// A key written twice in one mapping, as libyaml's parser reported it.
struct RepeatedKey: Sendable, Equatable {
    /// The key's text.
    var key: String
    /// Where the later occurrence starts (1-based, columns in Unicode scalars, as Yams marks count).
    var line: Int
    var column: Int
    /// Where it ends (same counting), exclusive; the same line for any key a graph writes.
    var endLine: Int
    var endColumn: Int
    /// The node it belongs to: the node id itself when node ids repeat under `nodes:`, the node whose
    /// parameters repeat one, else nil.
    var node: String?
}

/// One pass of libyaml's parser over the text, keeping only what the composer cannot: every later
/// occurrence of a key in the same mapping. (Yams composes a document into nodes and refuses one with a
/// repeated key outright, so these are found first and then left out by position.)
enum YAMLKeyScan {
    private final class Container {
        let isMapping: Bool
        /// The key this container is the value of (nil at the top, in a sequence, or under a complex key).
        let ownerKey: String?
        let parent: Container?
        var seen: Set<String> = []
        var expectingKey = true
        /// The key whose value is being read (mappings only).
        var currentKey: String?
        init(isMapping: Bool, ownerKey: String?, parent: Container?) {
            self.isMapping = isMapping
            self.ownerKey = ownerKey
            self.parent = parent
        }
        /// True for the top-level `nodes:` mapping.
        var isNodes: Bool { isMapping && ownerKey == "nodes" && parent?.parent == nil && parent?.isMapping == true }
    }

    /// The repeated keys of the first document of `text`, in order. Stops quietly at a syntax error
    /// (the composer reports it).
    static func repeatedKeys(in text: String) -> [RepeatedKey] {
        var parser = yaml_parser_t()
        guard yaml_parser_initialize(&parser) == 1 else { return [] }
        defer { yaml_parser_delete(&parser) }
        var bytes = Array(text.utf8)
        return bytes.withUnsafeMutableBufferPointer { buffer -> [RepeatedKey] in
            yaml_parser_set_input_string(&parser, buffer.baseAddress, buffer.count)
            var found: [RepeatedKey] = []
            var stack: [Container] = []
            var documents = 0
            /// A value (or a key) has been read in the innermost container.
            func completed(key: String?, start: yaml_mark_t, end: yaml_mark_t) {
                guard let top = stack.last, top.isMapping else { return }
                if top.expectingKey {
                    top.expectingKey = false
                    top.currentKey = key
                    guard let key else { return }
                    if !top.seen.insert(key).inserted {
                        var node: String?
                        if top.isNodes { node = key } else if top.parent?.isNodes == true { node = top.ownerKey }
                        found.append(RepeatedKey(key: key, line: Int(start.line) + 1, column: Int(start.column) + 1,
                                                 endLine: Int(end.line) + 1, endColumn: Int(end.column) + 1, node: node))
                    }
                } else {
                    top.expectingKey = true
                    top.currentKey = nil
                }
            }
            while true {
                var event = yaml_event_t()
                guard yaml_parser_parse(&parser, &event) == 1 else { return found }
                defer { yaml_event_delete(&event) }
                switch event.type {
                case YAML_STREAM_END_EVENT:
                    return found
                case YAML_DOCUMENT_START_EVENT:
                    documents += 1
                    if documents > 1 { return found }
                case YAML_SCALAR_EVENT:
                    let value = event.data.scalar.value.map { String(cString: $0) } ?? ""
                    completed(key: value, start: event.start_mark, end: event.end_mark)
                case YAML_ALIAS_EVENT:
                    completed(key: nil, start: event.start_mark, end: event.end_mark)
                case YAML_MAPPING_START_EVENT, YAML_SEQUENCE_START_EVENT:
                    let parent = stack.last
                    let owner = parent.flatMap { $0.isMapping && !$0.expectingKey ? $0.currentKey : nil }
                    stack.append(Container(isMapping: event.type == YAML_MAPPING_START_EVENT, ownerKey: owner, parent: parent))
                case YAML_MAPPING_END_EVENT, YAML_SEQUENCE_END_EVENT:
                    _ = stack.popLast()
                    // The container was a key (a complex key: never compared) or a value.
                    completed(key: nil, start: event.start_mark, end: event.end_mark)
                default:
                    break
                }
            }
        }
    }
}
