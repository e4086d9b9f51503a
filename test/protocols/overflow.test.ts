/**
 * A context overflow stays recognisable across families (issue 26): each upstream kind's overflow
 * refusal (the Messages API's `prompt is too long`, chat completions' `context_length_exceeded`,
 * generate-content's token-count INVALID_ARGUMENT) reaches a client of every route protocol in the
 * words that protocol's clients match (Claude Code's compaction, Codex's context-window error),
 * with the upstream's numbers and never its text. A real gateway on a real socket; a local HTTP
 * server answers every model call with its wire's overflow refusal.
 */
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"

/** in every refusal the upstream sends: the gateway must never pass the provider's text on */
const DETAIL = "upstream-detail-9c1e"
const TOKENS = 250123
const MAXIMUM = 200000

/** the overflow refusal of each upstream wire, as the providers send it */
const refusals = {
  anthropic: { type: "error", error: { type: "invalid_request_error", message: `prompt is too long: ${TOKENS} tokens > ${MAXIMUM} maximum ${DETAIL}` } },
  openai: {
    error: {
      message: `This model's maximum context length is ${MAXIMUM} tokens. However, your messages resulted in ${TOKENS} tokens. Please reduce the length of the messages. ${DETAIL}`,
      type: "invalid_request_error",
      param: "messages",
      code: "context_length_exceeded"
    }
  },
  gemini: { error: { code: 400, message: `The input token count (${TOKENS}) exceeds the maximum number of tokens allowed (${MAXIMUM}). ${DETAIL}`, status: "INVALID_ARGUMENT" } }
} as const
type Wire = keyof typeof refusals
const WIRES: ReadonlyArray<Wire> = ["anthropic", "openai", "gemini"]

let upstream: Server
let gw: TestGateway
const seen: Array<string> = []

beforeAll(async () => {
  upstream = createServer((req, res) => {
    req.resume()
    req.on("end", () => {
      const url = req.url ?? ""
      seen.push(url)
      const wire: Wire = url.startsWith("/v1/messages") ? "anthropic" : url.startsWith("/v1beta/") ? "gemini" : "openai"
      res.writeHead(400, { "content-type": "application/json" })
      res.end(JSON.stringify(refusals[wire]))
    })
  })
  await new Promise<void>((resolve) => upstream.listen(0, "127.0.0.1", resolve))
  const base = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`
  gw = await startGateway({
    providers: {
      anthropic: { type: "anthropic", baseUrl: base },
      openai: { type: "openai", baseUrl: `${base}/v1` },
      gemini: { type: "gemini", baseUrl: base }
    }
  })
})

afterAll(async () => {
  await gw?.close()
  await new Promise<void>((resolve) => upstream?.close(() => resolve()))
})

type Protocol = "chat" | "responses" | "messages" | "gemini"

const call = async (protocol: Protocol, model: string, stream: boolean) => {
  const request: Record<Protocol, { path: string; body: unknown }> = {
    chat: { path: "/v1/chat/completions", body: { model, messages: [{ role: "user", content: "hi" }], stream } },
    responses: { path: "/v1/responses", body: { model, input: "hi", stream, store: false } },
    messages: { path: "/v1/messages", body: { model, max_tokens: 64, messages: [{ role: "user", content: "hi" }], stream } },
    gemini: { path: `/v1beta/models/${model}:${stream ? "streamGenerateContent?alt=sse" : "generateContent"}`, body: { contents: [{ role: "user", parts: [{ text: "hi" }] }] } }
  }
  const { body, path } = request[protocol]
  const res = await fetch(`${gw.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: AbortSignal.timeout(10_000) })
  return { status: res.status, text: await res.text() }
}

describe("a context overflow, from every upstream kind to every route protocol", () => {
  for (const wire of WIRES) {
    for (const stream of [false, true]) {
      const mode = stream ? "stream" : "whole"
      it(`${wire} upstream → chat and Responses (${mode}): 400 context_length_exceeded in OpenAI's words`, async () => {
        for (const protocol of ["chat", "responses"] as const) {
          const answer = await call(protocol, `${wire}/big`, stream)
          expect(answer.status, answer.text).toBe(400)
          expect(answer.text).not.toContain(DETAIL)
          expect(JSON.parse(answer.text)).toEqual({
            error: {
              message: `This model's maximum context length is ${MAXIMUM} tokens. However, your messages resulted in ${TOKENS} tokens. Please reduce the length of the messages.`,
              type: "invalid_request_error",
              param: "messages",
              code: "context_length_exceeded"
            }
          })
        }
      })
      it(`${wire} upstream → Messages (${mode}): 400 invalid_request_error "prompt is too long: N tokens > M maximum"`, async () => {
        const answer = await call("messages", `${wire}/big`, stream)
        expect(answer.status, answer.text).toBe(400)
        expect(JSON.parse(answer.text)).toEqual({ type: "error", error: { type: "invalid_request_error", message: `prompt is too long: ${TOKENS} tokens > ${MAXIMUM} maximum` } })
      })
      it(`${wire} upstream → Gemini (${mode}): 400 INVALID_ARGUMENT with the token-count form`, async () => {
        const answer = await call("gemini", `${wire}/big`, stream)
        expect(answer.status, answer.text).toBe(400)
        expect(JSON.parse(answer.text)).toEqual({
          error: { code: 400, message: `The input token count (${TOKENS}) exceeds the maximum number of tokens allowed (${MAXIMUM}).`, status: "INVALID_ARGUMENT" }
        })
      })
    }
  }

  it("an overflow refusal without numbers still reads as one; another 400 stays the gateway's refusal", async () => {
    // the same server, other texts: swap the anthropic refusal for one without numbers
    const saved = refusals.anthropic.error.message
    const mutable = refusals.anthropic.error as { message: string }
    mutable.message = "prompt is too long"
    try {
      const messages = await call("messages", "anthropic/big", false)
      expect(JSON.parse(messages.text)).toEqual({ type: "error", error: { type: "invalid_request_error", message: "prompt is too long" } })
      const chat = await call("chat", "anthropic/big", false)
      expect(JSON.parse(chat.text).error.code).toBe("context_length_exceeded")
      mutable.message = `max_tokens: must be at most 8192 ${DETAIL}`
      const other = await call("messages", "anthropic/big", false)
      expect(other.status).toBe(400)
      expect(other.text).not.toContain("prompt is too long")
      expect(other.text).not.toContain(DETAIL)
    } finally {
      mutable.message = saved
    }
  })
})
