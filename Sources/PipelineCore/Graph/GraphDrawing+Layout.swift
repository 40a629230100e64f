extension GraphDrawing {
    /// Where a node sits in a left-to-right drawing, as `voicepipe graph` draws it (dot's `rankdir=LR`):
    /// `column` is the node's rank (the longest chain of links from a node nothing feeds), `row` its
    /// place within the column, ordered by the rows of what feeds it, then by the order of the file.
    public struct Place: Sendable, Hashable {
        public var column: Int
        public var row: Int
    }

    /// Columns and rows of every node of `g` (a link back to an earlier column, as in a feedback loop,
    /// does not move its target).
    public static func layout(_ g: ValidatedGraph) -> [String: Place] {
        let ids = g.nodes.map(\.id)
        var column = Dictionary(uniqueKeysWithValues: ids.map { ($0, 0) })
        // Longest path by relaxation, at most one pass per node (so cycles end).
        for _ in 0..<max(1, ids.count) {
            var changed = false
            for l in g.links where l.fromNode != l.toNode && !l.closesLoop {
                let c = (column[l.fromNode] ?? 0) + 1
                if c > column[l.toNode] ?? 0 && c < ids.count { column[l.toNode] = c; changed = true }
            }
            if !changed { break }
        }
        var places: [String: Place] = [:]
        let order = Dictionary(uniqueKeysWithValues: ids.enumerated().map { ($1, $0) })
        for c in 0...(column.values.max() ?? 0) {
            let here = ids.filter { column[$0] == c }
            func weight(_ id: String) -> Double {
                let feeds = g.links.filter { $0.toNode == id && !$0.closesLoop }.compactMap { places[$0.fromNode]?.row }
                return feeds.isEmpty ? Double(order[id] ?? 0) : Double(feeds.reduce(0, +)) / Double(feeds.count)
            }
            let sorted = here.sorted { (weight($0), order[$0] ?? 0) < (weight($1), order[$1] ?? 0) }
            for (row, id) in sorted.enumerated() { places[id] = Place(column: c, row: row) }
        }
        return places
    }
}
