/**
 * A multipart/form-data upload whose form is cut short (a file part and no closing delimiter, or a
 * part the gateway skips) made busboy destroy that part's stream with "Unexpected end of form";
 * with no listener on the stream this was an uncaught exception — in a real process, a crash of
 * the whole gateway from one malformed upload (found by the fuzzer once its seed was fixed).
 * Each such body must be a 400 in the route's envelope, raise nothing uncaught, and leave the
 * gateway serving.
 */
import { afterAll, beforeAll, expect, it } from "vitest"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { rawCall } from "../support/RawHttp.js"

const KEY = "sk-multipart-0123456789abcdef"
const boundary = "cutBoundary0123"
const part = (disposition: string, bytes: string) => `--${boundary}\r\nContent-Disposition: ${disposition}\r\nContent-Type: text/plain\r\n\r\n${bytes}\r\n`
const file = part('form-data; name="file"; filename="a.txt"', "abc")
const purpose = part('form-data; name="purpose"', "user_data")

const uncaught: Array<unknown> = []
const record = (error: unknown) => void uncaught.push(error)
let gw: TestGateway

beforeAll(async () => {
  process.on("uncaughtException", record)
  gw = await startGateway({ keys: [{ key: KEY, app: "multipart" }], providers: { mock: { type: "mock" } } })
})
afterAll(async () => {
  await gw?.close()
  process.off("uncaughtException", record)
})

const CUT_FORMS: ReadonlyArray<readonly [string, string]> = [
  ["the file part and no closing delimiter", purpose + file],
  ["the file part cut inside its bytes", purpose + file.slice(0, -4)],
  ["a second file part (skipped) and no closing delimiter", purpose + file + file],
  ["a part of another name with a filename (skipped) and no closing delimiter", purpose + part('form-data; name="other"; filename="b.txt"', "xyz")],
  ["a file part without a filename and no closing delimiter", purpose + part('form-data; name="file"', "abc")]
]

for (const [name, body] of CUT_FORMS) {
  for (const family of ["openai", "messages"] as const) {
    it(`${name} (${family}): 400 in the envelope, nothing uncaught, still serving`, async () => {
      const auth: Record<string, string> = family === "openai" ? { authorization: `Bearer ${KEY}` } : { "x-api-key": KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "files-api-2025-04-14" }
      const r = await rawCall(gw.port, "POST", "/v1/files", { headers: { ...auth, "content-type": `multipart/form-data; boundary=${boundary}` }, body })
      expect(r.status, r.text).toBe(400)
      const envelope = JSON.parse(r.text) as Record<string, any>
      if (family === "openai") expect(envelope.error.type).toBe("invalid_request_error")
      else expect(envelope.type).toBe("error")
      // the part's stream is destroyed as the parser finishes: give that a turn of the loop
      await new Promise((resolve) => setTimeout(resolve, 20))
      expect(uncaught.map(String)).toEqual([])
      const list = await rawCall(gw.port, "GET", "/v1/files", { headers: { authorization: `Bearer ${KEY}` } })
      expect(list.status).toBe(200)
      expect((JSON.parse(list.text) as { data: Array<unknown> }).data).toEqual([])
    })
  }
}
