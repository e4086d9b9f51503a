/**
 * Session and agent attribution (issue 26): who, in a coding agent's terms, made a model call.
 * A pure function of the request headers and the body's `metadata.user_id`, so every protocol (and
 * the Responses WebSocket, once per message) derives it the same way.
 *
 * - Claude Code: `x-claude-code-session-id`, `x-claude-code-agent-id`, `x-claude-code-parent-agent-id`,
 *   and `metadata.user_id` as a JSON string `{"device_id", "account_uuid", "session_id"}`.
 * - Codex: `session-id` / `thread-id` (older `session_id` / `conversation_id`).
 * - `metadata.user_id` that is not JSON is the user, as before.
 *
 * Ids are bounded: a value longer than MAX_ID or with characters outside printable ASCII is
 * ignored, never an error.
 */

export const MAX_ID = 128

export interface Attribution {
  readonly user?: string
  readonly session?: string
  readonly agent?: string
  readonly parentAgent?: string
}

const ID = /^[\x21-\x7e]+$/

/** an id as kept: trimmed, printable ASCII, at most MAX_ID characters; otherwise none */
export const boundedId = (value: unknown): string | undefined => {
  if (typeof value !== "string") return undefined
  const text = value.trim()
  return text.length > 0 && text.length <= MAX_ID && ID.test(text) ? text : undefined
}

const first = (headers: Readonly<Record<string, string | undefined>>, names: ReadonlyArray<string>): string | undefined => {
  for (const name of names) {
    const id = boundedId(headers[name])
    if (id !== undefined) return id
  }
  return undefined
}

/** `metadata.user_id` read as JSON when it is a JSON object, else as the plain user string */
const fromUserId = (userId: unknown): Attribution => {
  if (typeof userId !== "string") return {}
  const text = userId.trim()
  if (text.startsWith("{")) {
    let parsed: unknown
    try {
      parsed = JSON.parse(text)
    } catch {
      return {}
    }
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return {}
    const record = parsed as Readonly<Record<string, unknown>>
    const user = boundedId(record["account_uuid"]) ?? boundedId(record["device_id"])
    const session = boundedId(record["session_id"])
    return { ...(user !== undefined ? { user } : {}), ...(session !== undefined ? { session } : {}) }
  }
  return text === "" ? {} : { user: text }
}

/**
 * The attribution of one call: the session from the headers first (Claude Code's, then Codex's),
 * else from `metadata.user_id`; the agent and its parent from Claude Code's headers.
 * `user` is the plain `metadata.user_id` or the JSON's `account_uuid ?? device_id` (the caller
 * still checks it against the user format).
 */
export const attributionOf = (headers: Readonly<Record<string, string | undefined>>, metadataUserId?: unknown): Attribution => {
  const meta = fromUserId(metadataUserId)
  const session = first(headers, ["x-claude-code-session-id", "session-id", "thread-id", "session_id", "conversation_id"]) ?? meta.session
  const agent = first(headers, ["x-claude-code-agent-id"])
  const parentAgent = first(headers, ["x-claude-code-parent-agent-id"])
  return {
    ...(meta.user !== undefined ? { user: meta.user } : {}),
    ...(session !== undefined ? { session } : {}),
    ...(agent !== undefined ? { agent } : {}),
    ...(parentAgent !== undefined ? { parentAgent } : {})
  }
}
