/// The browser pages' files, compiled into the binary from `Web/Resources` (SwiftPM's `embedInCode`):
/// a copied `voicepipe` serves them with nothing beside it.
enum WebAssets {
    struct Asset: Sendable {
        var contentType: String
        var bytes: [UInt8]
    }

    /// The file served at `path` (`/`, `/console`, `/static/NAME`), if any.
    static func asset(at path: String) -> Asset? {
        switch path {
        case "/", "/index.html": Asset(contentType: "text/html; charset=utf-8", bytes: PackageResources.talk_html)
        case "/console", "/console/": Asset(contentType: "text/html; charset=utf-8", bytes: PackageResources.console_html)
        case "/static/talk.js": Asset(contentType: "text/javascript; charset=utf-8", bytes: PackageResources.talk_js)
        case "/static/capture-worklet.js": Asset(contentType: "text/javascript; charset=utf-8", bytes: PackageResources.capture_worklet_js)
        case "/static/console.js": Asset(contentType: "text/javascript; charset=utf-8", bytes: PackageResources.console_js)
        case "/static/style.css": Asset(contentType: "text/css; charset=utf-8", bytes: PackageResources.style_css)
        default: nil
        }
    }
}
