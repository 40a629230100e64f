import PipelineCore

/// The digital human's event names: what the avatar node reports about its session, channel and pushes.
extension EventName {
    public static let avatarChannel: EventName = "avatar_channel"
    public static let avatarInteraction: EventName = "avatar_interaction"
    public static let avatarPush: EventName = "avatar_push"
    public static let avatarSession: EventName = "avatar_session"
    public static let avatarStatus: EventName = "avatar_status"
    public static let avatarText: EventName = "avatar_text"
}

/// The digital human's own error codes.
extension NodeErrorCode {
    public static let ivhConfiguration: NodeErrorCode = "ivh_configuration"
}
