/**
 * Raw HTTP helpers for the Gemini-style tests: post a body to a gateway path, read the JSON,
 * the SSE frames or the JSON array of a stream, and check the 7.4 error envelope.
 */
import * as http from "node:http"
import { expect } from "vitest"

export interface GeminiReply {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly text: string
  /** the body as the socket delivered it, one entry per `data` event */
  readonly pieces: ReadonlyArray<string>
  readonly json: () => any
}

/** One request over a real socket, collecting the body as it arrives. */
export const request = (
  base: string,
  method: string,
  path: string,
  options: { readonly body?: unknown; readonly headers?: Record<string, string> } = {}
): Promise<GeminiReply> =>
  new Promise((resolve, reject) => {
    const url = new URL(path, base)
    const payload = options.body === undefined ? undefined : typeof options.body === "string" ? options.body : JSON.stringify(options.body)
    const req = http.request(
      url,
      {
        method,
        agent: false,
        headers: { ...(payload !== undefined ? { "content-type": "application/json", "content-length": String(Buffer.byteLength(payload)) } : {}), ...options.headers }
      },
      (res) => {
        const pieces: Array<string> = []
        res.setEncoding("utf8")
        res.on("data", (piece: string) => pieces.push(piece))
        res.on("error", reject)
        res.on("end", () => {
          const text = pieces.join("")
          resolve({ status: res.statusCode ?? 0, headers: res.headers, text, pieces, json: () => JSON.parse(text) })
        })
      }
    )
    req.on("error", reject)
    req.end(payload)
  })

export const post = (base: string, path: string, body: unknown, headers: Record<string, string> = {}) => request(base, "POST", path, { body, headers })

/** The `data:` payloads of an `alt=sse` body, parsed. */
export const sseChunks = (text: string): Array<any> =>
  text
    .split(/\r?\n\r?\n/)
    .filter((frame) => frame.startsWith("data: "))
    .map((frame) => JSON.parse(frame.slice("data: ".length)))

/** Expect a Gemini error envelope; returns the error object. */
export const expectGeminiError = (reply: GeminiReply, status: number, statusText: string, field?: string): any => {
  expect(reply.status, reply.text).toBe(status)
  expect(reply.headers["content-type"]).toMatch(/^application\/json/)
  const body = reply.json()
  expect(body.error.code).toBe(status)
  expect(body.error.status).toBe(statusText)
  expect(typeof body.error.message).toBe("string")
  if (field !== undefined) {
    expect(body.error.message).toContain(field)
    expect(body.error.details?.[0]?.fieldViolations?.[0]?.field).toBe(field)
  }
  return body.error
}

/** A user turn of text. */
export const userText = (text: string) => ({ role: "user", parts: [{ text }] })
