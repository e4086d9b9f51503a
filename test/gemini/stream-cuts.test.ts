/**
 * Both Gemini stream forms survive any network cut: the `alt=sse` body, split at every byte and
 * decoded incrementally, gives the same events to a standard SSE parser (`eventsource-parser`);
 * the JSON-array body, cut at every byte, holds only whole elements that `JSON.parse` reads and
 * that are a prefix of the final array. Checked for a plain answer with reasoning keep-alives and
 * a tool call, several candidates, and an error after output.
 */
import { createParser, type EventSourceMessage } from "eventsource-parser"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { chatSse, startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { post, userText } from "./helpers.js"

/** The events of a body delivered in the given byte pieces, decoded as a client would. */
const sseEvents = (pieces: ReadonlyArray<Uint8Array>): Array<EventSourceMessage> => {
  const events: Array<EventSourceMessage> = []
  const parser = createParser({ onEvent: (event) => events.push(event) })
  const decoder = new TextDecoder()
  for (const piece of pieces) parser.feed(decoder.decode(piece, { stream: true }))
  parser.feed(decoder.decode())
  return events
}

/**
 * The whole top-level elements of a (possibly cut) JSON array text: a scan of string and nesting
 * state finds where each element ends; each one must parse on its own.
 */
const wholeElements = (text: string): Array<unknown> => {
  const elements: Array<unknown> = []
  let depth = 0
  let inString = false
  let escaped = false
  let start = -1
  for (let i = 0; i < text.length; i++) {
    const c = text[i]
    if (inString) {
      if (escaped) escaped = false
      else if (c === "\\") escaped = true
      else if (c === '"') inString = false
      continue
    }
    if (c === '"') inString = true
    else if (c === "{" || c === "[") {
      if (depth === 1 && c === "{") start = i
      depth++
    } else if (c === "}" || c === "]") {
      depth--
      if (depth === 1 && c === "}") elements.push(JSON.parse(text.slice(start, i + 1)))
    }
  }
  return elements
}

describe("Gemini stream forms at every cut point", () => {
  let upstream: FakeUpstream
  let gateway: TestGateway

  beforeAll(async () => {
    upstream = await startFakeUpstream()
    gateway = await startGateway({ maxChoices: 2, providers: { up: { type: "openai", baseUrl: upstream.url, apiKey: "k" } }, aliases: { "gemini-*": "up/*" } })
  })
  afterAll(async () => {
    await gateway?.close()
    await upstream?.close()
  })

  const cases = [
    {
      name: "reasoning, text with multi-byte characters and a tool call",
      reply: () => chatSse({ reasoning: "thinking hard", content: "Grüße, 世界! \"quoted\" {braces} [brackets]", split: 4, toolCalls: [{ id: "t", name: "f", arguments: '{"q":"a\\"b"}' }] }),
      body: { contents: [userText("x")], tools: [{ functionDeclarations: [{ name: "f" }] }] }
    },
    {
      name: "two candidates",
      reply: () => chatSse({ content: "one two three", split: 3, delayMs: 1 }),
      body: { contents: [userText("x")], generationConfig: { candidateCount: 2 } }
    },
    {
      name: "an error after output",
      reply: () => ({ kind: "resetAfter" as const, chunks: [{ id: "c", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: "partial ]}\"" }, finish_reason: null }] }] }),
      body: { contents: [userText("x")] }
    }
  ]

  for (const c of cases) {
    it(`alt=sse: ${c.name}`, async () => {
      upstream.onRequest(c.reply)
      const reply = await post(gateway.url, "/v1beta/models/gemini-a:streamGenerateContent?alt=sse", c.body)
      expect(reply.status).toBe(200)
      const bytes = new TextEncoder().encode(reply.text)
      const whole = sseEvents([bytes])
      expect(whole.length).toBeGreaterThan(1)
      for (const event of whole) expect(() => JSON.parse(event.data)).not.toThrow()
      for (let cut = 0; cut <= bytes.length; cut++) {
        expect(sseEvents([bytes.subarray(0, cut), bytes.subarray(cut)])).toEqual(whole)
      }
    })

    it(`JSON array: ${c.name}`, async () => {
      upstream.onRequest(c.reply)
      const reply = await post(gateway.url, "/v1beta/models/gemini-a:streamGenerateContent", c.body)
      expect(reply.status).toBe(200)
      const all = JSON.parse(reply.text) as Array<unknown>
      expect(wholeElements(reply.text)).toEqual(all)
      for (let cut = 0; cut <= reply.text.length; cut++) {
        const seen = wholeElements(reply.text.slice(0, cut))
        expect(seen).toEqual(all.slice(0, seen.length))
      }
    })
  }
})
