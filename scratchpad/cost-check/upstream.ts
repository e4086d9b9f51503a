/**
 * An instant fake OpenAI upstream for the cost check: `POST /v1/chat/completions` answers at once
 * with a ~400-byte non-streaming `chat.completion` whose `model` echoes the request's.
 *
 * Standalone: `node --import tsx scratchpad/cost-check/upstream.ts [--port N] [--host H]`
 * prints `listening on http://HOST:PORT` when ready.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { pathToFileURL } from "node:url"

export interface RunningServer {
  /** http://127.0.0.1:PORT, no trailing slash */
  readonly url: string
  close(): Promise<void>
}

let counter = 0

const completion = (model: string): string =>
  JSON.stringify({
    id: `chatcmpl-cc${(++counter).toString(36).padStart(10, "0")}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [
      {
        index: 0,
        message: { role: "assistant", content: "Hello! How can I help you today?", refusal: null },
        logprobs: null,
        finish_reason: "stop"
      }
    ],
    usage: {
      prompt_tokens: 9,
      completion_tokens: 9,
      total_tokens: 18,
      prompt_tokens_details: { cached_tokens: 0, audio_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0, audio_tokens: 0 }
    }
  })

const send = (res: http.ServerResponse, status: number, body: string): void => {
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
  res.end(body)
}

const modelOf = (raw: string): string | undefined => {
  try {
    const parsed: unknown = JSON.parse(raw)
    if (typeof parsed === "object" && parsed !== null && "model" in parsed && typeof parsed.model === "string") {
      return parsed.model
    }
  } catch {
    // fall through: invalid JSON
  }
  return undefined
}

const handler = (req: http.IncomingMessage, res: http.ServerResponse): void => {
  const chunks: Buffer[] = []
  req.on("data", (chunk: Buffer) => chunks.push(chunk))
  req.on("end", () => {
    const pathname = (req.url ?? "/").split("?")[0]
    if (req.method !== "POST" || pathname !== "/v1/chat/completions") {
      send(res, 404, `{"error":{"message":"not found: ${req.method} ${pathname}","type":"invalid_request_error"}}`)
      return
    }
    const model = modelOf(Buffer.concat(chunks).toString("utf8"))
    if (model === undefined) {
      send(res, 400, `{"error":{"message":"body must be JSON with a string model","type":"invalid_request_error"}}`)
      return
    }
    send(res, 200, completion(model))
  })
}

export const startUpstream = (port = 0, host = "127.0.0.1"): Promise<RunningServer> =>
  new Promise((resolve, reject) => {
    const server = http.createServer(handler)
    // keep idle keep-alive sockets (the passthrough's and the gateway's pools) open between rounds
    server.keepAliveTimeout = 60_000
    server.once("error", reject)
    server.listen(port, host, () => {
      const { port: actual } = server.address() as AddressInfo
      resolve({
        url: `http://${host}:${actual}`,
        close: () =>
          new Promise<void>((done) => {
            server.closeAllConnections()
            server.close(() => done())
          })
      })
    })
  })

/** `--name value` from argv, if present */
export const flag = (argv: ReadonlyArray<string>, name: string): string | undefined => {
  const i = argv.indexOf(name)
  return i >= 0 ? argv[i + 1] : undefined
}

/** run standalone: print the listening line, exit when the parent (IPC) goes away or on SIGTERM/SIGINT */
export const serveStandalone = async (start: () => Promise<RunningServer>): Promise<void> => {
  const server = await start()
  process.stdout.write(`listening on ${server.url}\n`)
  const stop = (): void => {
    void server.close().finally(() => process.exit(0))
    setTimeout(() => process.exit(0), 1000).unref()
  }
  process.once("SIGTERM", stop)
  process.once("SIGINT", stop)
  if (process.send !== undefined) process.once("disconnect", stop)
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const argv = process.argv.slice(2)
  await serveStandalone(() => startUpstream(Number(flag(argv, "--port") ?? 0), flag(argv, "--host") ?? "127.0.0.1"))
}
