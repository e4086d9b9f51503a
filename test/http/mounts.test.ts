import { describe, expect, it } from "vitest"
import { mounts } from "../../src/App.js"
import { familyOf } from "../../src/http/Route.js"

/** The envelope family of each path, as the route groups are mounted in src/App.ts. */
describe("mounts: the family of a path is the one declared where its group is mounted", () => {
  const family = familyOf(mounts)
  const version = { "anthropic-version": "2023-06-01" }

  it.each([
    ["/v1beta", {}, "gemini"],
    ["/v1beta/models/x:generateContent", {}, "gemini"],
    ["/upload/v1beta/files", {}, "gemini"],
    ["/upload/v1beta", {}, "gateway"],
    ["/v1/messages", {}, "messages"],
    ["/v1/messages/count_tokens", {}, "messages"],
    ["/v1/messagesx", {}, "openai"],
    ["/v1/models", {}, "openai"],
    ["/v1/models", version, "messages"],
    ["/v1/models/m", { "anthropic-beta": "x" }, "messages"],
    ["/v1/files/file-1/content", version, "messages"],
    ["/v1/files", {}, "openai"],
    ["/v1/chat/completions", version, "openai"],
    ["/v1", {}, "gateway"],
    ["/v1beta2", {}, "gateway"],
    ["/gateway/usage", {}, "gateway"],
    ["/", {}, "gateway"]
  ] as const)("%s %j → %s", (path, headers, expected) => {
    expect(family(path, headers)).toBe(expected)
  })
})
