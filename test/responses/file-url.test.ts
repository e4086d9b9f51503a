/**
 * `input_file.file_url`: the gateway fetches the file and delivers a PDF as a file part and text as
 * text; loopback and private addresses are refused unless `remoteFiles.allowPrivateNetworks`.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"

const pdf = Buffer.from("%PDF-1.4\n1 0 obj << >> endobj\ntrailer << >>\n%%EOF\n", "latin1")

interface Part {
  readonly type: string
  readonly text?: string
  readonly file?: { readonly file_data?: string }
}
interface UpstreamBody {
  readonly messages: ReadonlyArray<{ readonly role: string; readonly content: string | ReadonlyArray<Part> }>
}

describe("Responses input_file with file_url", () => {
  let files: http.Server
  let filesUrl: string
  let upstream: FakeUpstream
  let open: TestGateway
  let guarded: TestGateway

  beforeAll(async () => {
    files = http.createServer((req, res) => {
      if (req.url === "/doc.pdf") return res.writeHead(200, { "content-type": "application/pdf" }).end(pdf)
      if (req.url === "/notes.txt") return res.writeHead(200, { "content-type": "text/plain; charset=utf-8" }).end("remember the milk")
      if (req.url === "/blob") return res.writeHead(200, { "content-type": "application/octet-stream" }).end(Buffer.from([1, 2, 3, 0, 255]))
      if (req.url === "/big") return res.writeHead(200, { "content-type": "text/plain" }).end("x".repeat(5000))
      res.writeHead(404).end()
    })
    await new Promise<void>((r) => files.listen(0, "127.0.0.1", () => r()))
    filesUrl = `http://127.0.0.1:${(files.address() as AddressInfo).port}`
    upstream = await startFakeUpstream()
    const providers = { up: { type: "openai", baseUrl: upstream.url, apiKey: "k" } }
    open = await startGateway({ providers, remoteFiles: { allowPrivateNetworks: true, maxBytes: 4096 } })
    guarded = await startGateway({ providers })
  })
  afterAll(async () => {
    await open?.close()
    await guarded?.close()
    await upstream?.close()
    await new Promise<void>((r) => files.close(() => r()))
  })

  const create = (gw: TestGateway, fileUrl: string) =>
    fetch(`${gw.url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "up/m",
        input: [{ role: "user", content: [{ type: "input_text", text: "read this" }, { type: "input_file", file_url: fileUrl }] }]
      })
    })

  const lastUserParts = (): ReadonlyArray<Part> => {
    const body = upstream.requests[upstream.requests.length - 1].body as UpstreamBody
    const user = body.messages.filter((m) => m.role === "user").pop()
    return typeof user?.content === "string" ? [{ type: "text", text: user.content }] : (user?.content ?? [])
  }

  it("delivers a PDF as a file part with its bytes", async () => {
    const res = await create(open, `${filesUrl}/doc.pdf`)
    expect(res.status).toBe(200)
    const file = lastUserParts().find((p) => p.type === "file")
    expect(file?.file?.file_data).toBe(`data:application/pdf;base64,${pdf.toString("base64")}`)
  })

  it("delivers text as a text part", async () => {
    expect((await create(open, `${filesUrl}/notes.txt`)).status).toBe(200)
    expect(lastUserParts().map((p) => p.text)).toContain("remember the milk")
  })

  it("refuses other kinds, failures and oversized files with 400 naming the field", async () => {
    for (const path of ["/blob", "/missing", "/big"]) {
      const res = await create(open, `${filesUrl}${path}`)
      expect(res.status).toBe(400)
      const body = (await res.json()) as { error: { param: string; message: string } }
      expect(body.error.param).toBe("input.0.content.1.file_url")
    }
  })

  it("refuses loopback addresses by default, by IP and by name", async () => {
    const port = (files.address() as AddressInfo).port
    for (const url of [`${filesUrl}/doc.pdf`, `http://localhost:${port}/doc.pdf`, "file:///etc/passwd"]) {
      const res = await create(guarded, url)
      expect(res.status).toBe(400)
      const body = (await res.json()) as { error: { param: string; message: string } }
      expect(body.error.param).toBe("input.0.content.1.file_url")
      expect(body.error.message).toContain("not allowed")
    }
  })
})
