import * as http from "node:http"

/** A raw answer: status, headers and the body as text. */
export interface RawReply {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly text: string
}

export interface RawCallOptions {
  readonly headers?: Readonly<Record<string, string>>
  readonly body?: string | Buffer
  /** send the body with Transfer-Encoding: chunked instead of a Content-Length */
  readonly chunked?: boolean
}

/**
 * One request on a fresh connection to 127.0.0.1:port, with exactly the headers given (the Host
 * header may be overridden through `headers.host`).
 */
export const rawCall = (port: number, method: string, path: string, options: RawCallOptions = {}): Promise<RawReply> =>
  new Promise<RawReply>((resolve, reject) => {
    const headers: Record<string, string> = { ...options.headers }
    if (options.body !== undefined && options.chunked !== true) headers["content-length"] = String(Buffer.byteLength(options.body))
    if (options.chunked === true) headers["transfer-encoding"] = "chunked"
    const req = http.request({ host: "127.0.0.1", port, method, path, headers, agent: false }, (res) => {
      const chunks: Array<Buffer> = []
      res.on("data", (c: Buffer) => chunks.push(c))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text: Buffer.concat(chunks).toString("utf8") }))
      res.on("error", reject)
    })
    // the server may answer and close before the whole body is sent
    req.on("error", reject)
    if (options.body !== undefined) req.write(options.body)
    req.end()
  })
