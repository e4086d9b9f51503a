/**
 * Refusals of the Responses-style endpoint (spec 7.2): each with its status, code and param, in
 * the OpenAI error shape, before anything reaches the upstream.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { apiError, clientFor, errorOf, expectRefusal, gatewayDocument, post, type Json } from "./helpers.js"

let upstream: FakeUpstream
let gateway: TestGateway

beforeAll(async () => {
  upstream = await startFakeUpstream()
  gateway = await startGateway(gatewayDocument(upstream.url))
})

afterAll(async () => {
  await gateway?.close()
  await upstream?.close()
})

beforeEach(() => upstream.reset())

const model = "up/gpt-x"
const fn = (name: string): Json => ({ type: "function", name, parameters: { type: "object", properties: {} } })

interface Case {
  readonly name: string
  readonly body: Json
  readonly status: number
  readonly code: string
  readonly param: string | null
  readonly message?: string
}

const cases: ReadonlyArray<Case> = [
  { name: "conversation", body: { input: "hi", conversation: "conv_123" }, status: 400, code: "unsupported_parameter", param: "conversation" },
  { name: "conversation object", body: { input: "hi", conversation: { id: "conv_123" } }, status: 400, code: "unsupported_parameter", param: "conversation" },
  { name: "background true", body: { input: "hi", background: true }, status: 400, code: "unsupported_parameter", param: "background" },
  { name: "prompt", body: { input: "hi", prompt: { id: "pmpt_123", version: "2" } }, status: 400, code: "unsupported_parameter", param: "prompt" },
  { name: "top_logprobs", body: { input: "hi", top_logprobs: 3 }, status: 400, code: "unsupported_parameter", param: "top_logprobs" },
  { name: "truncation auto", body: { input: "hi", truncation: "auto" }, status: 400, code: "unsupported_parameter", param: "truncation" },
  { name: "local_shell tool", body: { input: "hi", tools: [fn("f"), { type: "local_shell" }] }, status: 400, code: "unsupported_parameter", param: "tools.1.type" },
  { name: "tool_search tool", body: { input: "hi", tools: [{ type: "tool_search" }] }, status: 400, code: "unsupported_parameter", param: "tools.0.type" },
  {
    name: "computer_use_preview tool",
    body: { input: "hi", tools: [fn("f"), fn("g"), { type: "computer_use_preview", display_width: 1024, display_height: 768, environment: "linux" }] },
    status: 400,
    code: "unsupported_parameter",
    param: "tools.2.type"
  },
  { name: "shell tool", body: { input: "hi", tools: [{ type: "shell" }, fn("f")] }, status: 400, code: "unsupported_parameter", param: "tools.0.type" },
  {
    name: "hosted tool inside a namespace",
    body: { input: "hi", tools: [{ type: "namespace", name: "ns", description: "d", tools: [fn("ok"), { type: "web_search" }] }] },
    status: 400,
    code: "unsupported_parameter",
    param: "tools.0.tools.1.type"
  },
  {
    name: "namespace inside a namespace",
    body: { input: "hi", tools: [fn("f"), { type: "namespace", name: "outer", description: "d", tools: [{ type: "namespace", name: "inner", tools: [fn("x")] }] }] },
    status: 400,
    code: "unsupported_parameter",
    param: "tools.1.tools.0.type"
  },
  {
    name: "unsupported tool in additional_tools",
    body: { input: [{ role: "user", content: "hi" }, { type: "additional_tools", role: "developer", tools: [{ type: "local_shell" }] }] },
    status: 400,
    code: "unsupported_parameter",
    param: "input.1.tools.0.type"
  },
  {
    name: "function_call_output with an unknown call_id",
    body: {
      input: [
        { role: "user", content: "hi" },
        { type: "function_call", call_id: "call_known", name: "f", arguments: "{}" },
        { type: "function_call_output", call_id: "call_known", output: "ok" },
        { type: "function_call_output", call_id: "call_unknown", output: "stray" }
      ],
      tools: [fn("f")]
    },
    status: 400,
    code: "invalid_request_error",
    param: "input.3.call_id"
  },
  {
    name: "custom_tool_call_output with an unknown call_id",
    body: { input: [{ type: "custom_tool_call_output", call_id: "call_x", output: "?" }, { role: "user", content: "hi" }] },
    status: 400,
    code: "invalid_request_error",
    param: "input.0.call_id"
  },
  {
    name: "input_image with a file_id",
    body: { input: [{ role: "user", content: [{ type: "input_text", text: "look" }, { type: "input_image", file_id: "file-0123456789abcdef0123456789abcdef", detail: "auto" }] }] },
    status: 404,
    code: "invalid_request_error",
    param: null,
    message: "No such File object: file-0123456789abcdef0123456789abcdef"
  },
  {
    name: "input_file with a file_id",
    body: { input: [{ role: "user", content: [{ type: "input_file", file_id: "file-abc" }] }] },
    status: 404,
    code: "invalid_request_error",
    param: null,
    message: "No such File object: file-abc"
  },
  { name: "unknown input item type", body: { input: [{ type: "teleport", to: "mars" }] }, status: 400, code: "invalid_request_error", param: "input.0.type" },
  { name: "missing model", body: { model: undefined, input: "hi" }, status: 400, code: "invalid_request_error", param: "model" }
]

describe("responses refusals (7.2)", () => {
  for (const c of cases) {
    it(`${c.name}: ${c.status} ${c.code}${c.param !== null ? ` param ${c.param}` : ""}`, async () => {
      const raw = await post(gateway, { model, ...c.body })
      const error = expectRefusal(raw, c.status, c.code, c.param === null ? undefined : c.param)
      expect(error.type).toBe("invalid_request_error")
      expect(error.message.length).toBeGreaterThan(0)
      if (c.message !== undefined) expect(error.message).toBe(c.message)
      expect(upstream.requests).toHaveLength(0)
    })
  }

  it("accepted no-ops: background false, truncation disabled, include, metadata, user, service_tier, prompt_cache_key, safety_identifier, max_tool_calls, stream_options", async () => {
    const raw = await post(gateway, {
      model,
      input: "hi",
      background: false,
      truncation: "disabled",
      include: ["reasoning.encrypted_content"],
      metadata: { a: "b" },
      user: "u-1",
      service_tier: "auto",
      prompt_cache_key: "k",
      safety_identifier: "s",
      max_tool_calls: 3,
      stream_options: { include_obfuscation: false },
      reasoning: { effort: "low", summary: "auto" }
    })
    expect(raw.status).toBe(200)
    expect(upstream.requests).toHaveLength(1)
  })

  it("refusals through the SDK carry status, code and param", async () => {
    const client = clientFor(gateway)
    const background = await apiError(client.responses.create({ model, input: "hi", background: true }))
    expect([background.status, background.code, background.param]).toEqual([400, "unsupported_parameter", "background"])
    const truncation = await apiError(client.responses.create({ model, input: "hi", truncation: "auto" }))
    expect([truncation.status, truncation.code, truncation.param]).toEqual([400, "unsupported_parameter", "truncation"])
    const tool = await apiError(client.responses.create({ model, input: "hi", tools: [{ type: "local_shell" }] }))
    expect([tool.status, tool.code, tool.param]).toEqual([400, "unsupported_parameter", "tools.0.type"])
    const file = await apiError(client.responses.create({ model, input: [{ role: "user", content: [{ type: "input_file", file_id: "file-zzz" }] }] }))
    expect(file.status).toBe(404)
    expect(file.message).toContain("No such File object: file-zzz")
    expect(upstream.requests).toHaveLength(0)
  })

  it("a wrong key is 401 in the OpenAI shape", async () => {
    const raw = await post(gateway, { model, input: "hi" }, "sk-not-a-key-at-all")
    expect(raw.status).toBe(401)
    expect(errorOf(raw).type).toBe("authentication_error")
  })
})
