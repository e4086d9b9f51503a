/**
 * A chat-completions upstream for routing tests: a real HTTP server on 127.0.0.1 that answers as
 * `from <name>`, so that which target answered a call is plain both in what reached each upstream
 * and in the answer. The test steers it while it runs: a delay before the first byte of every
 * answer, and per request a behaviour: answer, fail with a status, hold a stream open after its
 * first text until `release`, or cut a stream after some text.
 */
import type { IncomingMessage, ServerResponse } from "node:http"
import { makeFakeServer, readJsonBody } from "./FakeServer.js"
import { chatCompletionObject, chunks } from "./FakeUpstream.js"

/** What the upstream does with one request. */
export type Behaviour =
  | { readonly kind: "answer" }
  /** the status with an OpenAI error body, before any output */
  | { readonly kind: "fail"; readonly status: number }
  /** (streamed requests) the role and `held by <name>;` at once, the rest after `release` */
  | { readonly kind: "hold" }
  /** (streamed requests) the role and PARTIAL_TEXT, then the connection is reset */
  | { readonly kind: "cut" }

export const PARTIAL_TEXT = "partial answer"

/** One request as it reached the upstream. */
export interface Seen {
  readonly model: string
  readonly stream: boolean
  /** the text of the last message (the tests make it unique per call) */
  readonly text: string
  readonly authorization: string
  /** what the upstream did with it */
  readonly behaviour: Behaviour["kind"]
}

export interface RoutedUpstream {
  readonly name: string
  /** "http://127.0.0.1:PORT/v1" */
  readonly url: string
  readonly requests: Array<Seen>
  /** ms before the first byte of every answer (0: at once) */
  delayMs: number
  /** the behaviour for each request (default: answer) */
  behave: (request: { readonly stream: boolean; readonly text: string }) => Behaviour
  /** streams held now */
  readonly held: () => number
  /** let every held stream finish */
  readonly release: () => void
  readonly close: () => Promise<void>
}

const sse = (chunk: unknown) => `data: ${JSON.stringify(chunk)}\n\n`

const lastText = (body: Record<string, unknown>): string => {
  const messages = Array.isArray(body.messages) ? (body.messages as Array<{ content?: unknown }>) : []
  const content = messages[messages.length - 1]?.content
  if (typeof content === "string") return content
  if (Array.isArray(content)) return content.map((p: { text?: unknown }) => (typeof p.text === "string" ? p.text : "")).join("")
  return ""
}

export const startRoutedUpstream = async (name: string): Promise<RoutedUpstream> => {
  const kit = makeFakeServer()
  const requests: Array<Seen> = []
  /** the release of each held stream */
  const waiting = new Set<() => void>()

  const release = () => {
    for (const go of [...waiting]) go()
  }
  /** made once the server listens (no request reaches `handle` before) */
  let upstream: RoutedUpstream | undefined

  /** until `release` or the connection closes */
  const hold = (res: ServerResponse) =>
    new Promise<void>((resolve) => {
      const go = () => {
        waiting.delete(go)
        res.off("close", go)
        resolve()
      }
      waiting.add(go)
      res.once("close", go)
    })

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    // not JSON: answered below as a 400
    const body = await readJsonBody(req)
    if (req.method !== "POST" || req.url !== "/v1/chat/completions" || typeof body.model !== "string") {
      res.writeHead(400, { "content-type": "application/json" }).end(JSON.stringify({ error: { message: "not a chat completion", type: "invalid_request_error" } }))
      return
    }
    const model = body.model
    const stream = body.stream === true
    const text = lastText(body)
    const self = upstream as RoutedUpstream
    const behaviour = self.behave({ stream, text })
    requests.push({ model, stream, text, authorization: String(req.headers.authorization ?? ""), behaviour: behaviour.kind })
    if (self.delayMs > 0) await kit.sleep(self.delayMs, res)
    if (kit.gone(res)) return
    if (behaviour.kind === "fail") {
      const payload = JSON.stringify({ error: { message: `${name} is failing`, type: "server_error", param: null, code: null } })
      res.writeHead(behaviour.status, { "content-type": "application/json", "content-length": Buffer.byteLength(payload) }).end(payload)
      return
    }
    const content = `from ${name}`
    if (!stream) {
      const payload = JSON.stringify(chatCompletionObject({ model, content }))
      res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(payload) }).end(payload)
      return
    }
    const meta = { model, id: `chatcmpl-${name}-${requests.length}` }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" })
    await kit.write(res, sse(chunks.role(meta)))
    if (behaviour.kind === "cut") {
      await kit.write(res, sse(chunks.text(PARTIAL_TEXT, meta)))
      // let the bytes reach the gateway before the reset
      await kit.sleep(20, res)
      kit.destroy(req, res)
      return
    }
    if (behaviour.kind === "hold") {
      await kit.write(res, sse(chunks.text(`held by ${name}; `, meta)))
      await hold(res)
    }
    await kit.write(res, sse(chunks.text(content, meta)))
    await kit.write(res, sse(chunks.finish("stop", meta)))
    await kit.write(res, sse(chunks.usage({ prompt: 10, completion: 3 }, meta)))
    await kit.write(res, "data: [DONE]\n\n")
    if (!kit.gone(res)) res.end()
  }

  const port = await kit.listen((req, res) => {
    handle(req, res).catch(() => kit.destroy(req, res))
  })
  upstream = {
    name,
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    delayMs: 0,
    behave: () => ({ kind: "answer" }),
    held: () => waiting.size,
    release,
    close: () => {
      release()
      return kit.close()
    }
  }
  return upstream
}
