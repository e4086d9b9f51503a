// The floor of a chat-completions gateway written in Effect (issue 15): only the steps no Effect
// gateway can skip, each done the cheapest way we know. Per request: one fiber (Runtime.runFork),
// the body read in one Effect.async, JSON.parse, a translated upstream body (JSON.stringify), the
// upstream call over an undici keep-alive pool in one Effect.async, and then
//  - non-streamed: the whole answer text, JSON.parse, the client's chat.completion built and written;
//  - streamed: one Effect.async per network read, SSE frames split, each chunk JSON.parse'd and a
//    new chunk JSON.stringify'd and written, then `data: [DONE]`.
// No router, no keys, no schema decode, no usage record, no metrics: everything the gateway does
// beyond this is what it adds to the floor.
//
//   node scratchpad/floor/effect-floor.mjs <upstreamUrl>   prints `listening on http://127.0.0.1:PORT`
import { Effect, Runtime } from "effect"
import * as http from "node:http"
import { Agent, request } from "undici"

const upstream = `${(process.argv[2] ?? "").replace(/\/+$/, "")}/v1/chat/completions`
const agent = new Agent({ keepAliveTimeout: 60_000, headersTimeout: 0, bodyTimeout: 0, connections: 4096 })
const run = Runtime.runFork(Runtime.defaultRuntime)

const readBody = (req) =>
  Effect.async((resume) => {
    const chunks = []
    req.on("data", (c) => chunks.push(c))
    req.on("end", () => resume(Effect.succeed(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks))))
    req.on("error", () => resume(Effect.fail("body")))
  })

const post = (body) =>
  Effect.async((resume) => {
    const controller = new AbortController()
    request(upstream, { method: "POST", headers: { "content-type": "application/json", authorization: "Bearer sk-bench" }, body, dispatcher: agent, signal: controller.signal }).then(
      (response) => resume(Effect.succeed(response)),
      () => resume(Effect.fail("upstream"))
    )
    return Effect.sync(() => controller.abort())
  })

const text = (response) =>
  Effect.async((resume) => {
    response.body.text().then(
      (t) => resume(Effect.succeed(t)),
      () => resume(Effect.fail("upstream"))
    )
  })

/** Every piece the body has buffered, waiting for one when there is none; undefined at the end. */
const read = (body) =>
  Effect.async((resume) => {
    const take = () => {
      const pieces = []
      let piece
      while ((piece = body.read()) !== null) pieces.push(piece)
      return pieces
    }
    const now = take()
    if (now.length > 0) return resume(Effect.succeed(now))
    if (body.readableEnded) return resume(Effect.succeed(undefined))
    const done = () => {
      body.off("readable", onReadable)
      body.off("end", onEnd)
    }
    const onReadable = () => {
      const pieces = take()
      if (pieces.length === 0) return
      done()
      resume(Effect.succeed(pieces))
    }
    const onEnd = () => {
      done()
      resume(Effect.succeed(undefined))
    }
    body.on("readable", onReadable)
    body.on("end", onEnd)
    return Effect.sync(done)
  })

const translate = (wire) => JSON.stringify({ model: "m", messages: wire.messages.map((m) => ({ role: m.role, content: m.content })), stream: wire.stream === true, ...(wire.stream ? { stream_options: { include_usage: true } } : {}) })

const whole = (res, wire, response) =>
  Effect.map(text(response), (t) => {
    const answer = JSON.parse(t)
    const choice = answer.choices[0]
    const out = {
      id: "chatcmpl-floor",
      object: "chat.completion",
      created: 0,
      model: wire.model,
      choices: [{ index: 0, message: { role: "assistant", content: choice.message.content, refusal: null }, logprobs: null, finish_reason: choice.finish_reason }],
      usage: answer.usage
    }
    res.writeHead(200, { "content-type": "application/json" })
    res.end(JSON.stringify(out))
  })

const streamed = (res, wire, response) => {
  let rest = ""
  const encode = (pieces) => {
    let out = ""
    const all = rest + (pieces.length === 1 ? pieces[0].toString("utf8") : Buffer.concat(pieces).toString("utf8"))
    let start = 0
    for (let end = all.indexOf("\n\n", start); end >= 0; end = all.indexOf("\n\n", start)) {
      const frame = all.slice(start, end)
      start = end + 2
      if (!frame.startsWith("data: ") || frame === "data: [DONE]") continue
      const chunk = JSON.parse(frame.slice(6))
      const delta = chunk.choices[0]?.delta ?? {}
      out += `data: ${JSON.stringify({ id: "chatcmpl-floor", object: "chat.completion.chunk", created: 0, model: wire.model, choices: [{ index: 0, delta, logprobs: null, finish_reason: chunk.choices[0]?.finish_reason ?? null }] })}\n\n`
    }
    rest = all.slice(start)
    return out
  }
  res.writeHead(200, { "content-type": "text/event-stream" })
  const loop = Effect.flatMap(read(response.body), (pieces) => {
    if (pieces === undefined) return Effect.sync(() => res.end("data: [DONE]\n\n"))
    const out = encode(pieces)
    if (out !== "") res.write(out)
    return loop
  })
  return loop
}

const handle = (req, res) =>
  Effect.flatMap(readBody(req), (buffer) => {
    const wire = JSON.parse(buffer.toString("utf8"))
    return Effect.flatMap(post(translate(wire)), (response) => (wire.stream === true ? streamed(res, wire, response) : whole(res, wire, response)))
  }).pipe(Effect.catchAll(() => Effect.sync(() => (res.headersSent ? res.destroy() : (res.writeHead(502), res.end())))))

const server = http.createServer({ keepAliveTimeout: 65_000, requestTimeout: 0 }, (req, res) => {
  const fiber = run(handle(req, res))
  res.once("close", () => {
    if (!res.writableEnded) fiber.unsafeInterruptAsFork(fiber.id())
  })
})
server.listen(0, "127.0.0.1", () => process.stdout.write(`listening on http://127.0.0.1:${server.address().port}\n`))
process.once("SIGTERM", () => process.exit(0))
