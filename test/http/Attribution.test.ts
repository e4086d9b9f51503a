import { describe, expect, it } from "vitest"
import { attributionOf, MAX_ID } from "../../src/http/Attribution.js"

describe("attributionOf", () => {
  it("reads Claude Code's headers and its JSON metadata.user_id", () => {
    const userId = JSON.stringify({ device_id: "dev-1", account_uuid: "acc-2", session_id: "sess-from-meta" })
    expect(
      attributionOf({ "x-claude-code-session-id": "sess-1", "x-claude-code-agent-id": "agent-7", "x-claude-code-parent-agent-id": "agent-1" }, userId)
    ).toEqual({ user: "acc-2", session: "sess-1", agent: "agent-7", parentAgent: "agent-1" })
  })

  it("takes the session from metadata.user_id without a header, and device_id as the user without an account", () => {
    expect(attributionOf({}, JSON.stringify({ device_id: "dev-1", session_id: "s-9" }))).toEqual({ user: "dev-1", session: "s-9" })
  })

  it("reads Codex's session headers, newer before older", () => {
    expect(attributionOf({ "session-id": "c-1", "thread-id": "t-1" })).toEqual({ session: "c-1" })
    expect(attributionOf({ "thread-id": "t-1" })).toEqual({ session: "t-1" })
    expect(attributionOf({ session_id: "old-1" })).toEqual({ session: "old-1" })
    expect(attributionOf({ conversation_id: "conv-1" })).toEqual({ session: "conv-1" })
  })

  it("keeps a plain metadata.user_id as the user", () => {
    expect(attributionOf({}, "alice@example.com")).toEqual({ user: "alice@example.com" })
  })

  it("ignores ids over the bound or with control characters, and JSON that is not an object, never failing", () => {
    const long = "x".repeat(MAX_ID + 1)
    expect(attributionOf({ "x-claude-code-session-id": long, "x-claude-code-agent-id": "a\u0000b" }, JSON.stringify({ session_id: long }))).toEqual({})
    expect(attributionOf({ "x-claude-code-session-id": long, "session-id": "fallback" })).toEqual({ session: "fallback" })
    expect(attributionOf({}, "{not json")).toEqual({})
    // not a JSON object: the plain user string (the user format check in callerOf still applies)
    expect(attributionOf({}, "[1,2]")).toEqual({ user: "[1,2]" })
    expect(attributionOf({}, 42)).toEqual({})
    expect(attributionOf({ "x-claude-code-session-id": "x".repeat(MAX_ID) })).toEqual({ session: "x".repeat(MAX_ID) })
  })
})
