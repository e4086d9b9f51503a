/**
 * Stored files delivered into model requests (spec 2.4 "Delivery to the model", 4.4, 8): chat
 * `file` parts, Responses `input_image` / `input_file`, Messages `image` / `document` blocks with a
 * `file` source, Gemini `fileData` — and what reaches a chat-completions upstream (image as an
 * image_url data URL, PDF as a file part, text as a text part), a native Messages upstream and a
 * native generate-content upstream. Then the per-request bound: 32 files and 50 MB counted at
 * base64 size.
 */
import Anthropic from "@anthropic-ai/sdk"
import { GoogleGenAI } from "@google/genai"
import OpenAI, { toFile } from "openai"
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest"
import { startFakeGeminiUpstream, type FakeGeminiUpstream } from "../support/FakeGeminiUpstream.js"
import { startFakeMessagesUpstream, type FakeMessagesUpstream } from "../support/FakeMessagesUpstream.js"
import { startFakeUpstream, type FakeUpstream } from "../support/FakeUpstream.js"
import { startGateway, type TestGateway } from "../support/Gateway.js"
import { PDF, PNG, TEXT, geminiBody, hexOf, pngOfSize, rejection } from "./fixtures.js"

const KEY = "sk-files-delivery-0001"

const PNG_URL = `data:image/png;base64,${PNG.toString("base64")}`
const PDF_URL = `data:application/pdf;base64,${PDF.toString("base64")}`

type Json = Record<string, any>

let chatUp: FakeUpstream
let messagesUp: FakeMessagesUpstream
let geminiUp: FakeGeminiUpstream
let gateway: TestGateway
let client: OpenAI
let claude: Anthropic
let ai: GoogleGenAI
/** the three stored files of the suite */
let png: string
let pdf: string
let txt: string

/** The parts of the last user message that reached the chat-completions upstream. */
const chatUserParts = (): Array<Json> => {
  expect(chatUp.requests.length).toBeGreaterThan(0)
  const body = chatUp.requests[chatUp.requests.length - 1].body as Json
  const user = (body.messages as Array<Json>).filter((m) => m.role === "user").pop()!
  return typeof user.content === "string" ? [{ type: "text", text: user.content }] : user.content
}

const upload = async (bytes: Buffer, name: string) => (await client.files.create({ file: await toFile(bytes, name), purpose: "user_data" })).id

beforeAll(async () => {
  chatUp = await startFakeUpstream()
  messagesUp = await startFakeMessagesUpstream()
  geminiUp = await startFakeGeminiUpstream()
  gateway = await startGateway({
    keys: [{ key: KEY, app: "deliver" }],
    providers: {
      up: { type: "openai", baseUrl: chatUp.url, apiKey: "k" },
      claude: { type: "anthropic", baseUrl: messagesUp.origin, apiKey: "k" },
      gem: { type: "gemini", baseUrl: geminiUp.origin, apiKey: "k" }
    },
    aliases: { "g-up": "up/m", "g-native": "gem/gemini-x" }
  })
  client = new OpenAI({ apiKey: KEY, baseURL: `${gateway.url}/v1`, maxRetries: 0, timeout: 20_000 })
  claude = new Anthropic({ apiKey: KEY, baseURL: gateway.url, maxRetries: 0, timeout: 20_000 })
  ai = new GoogleGenAI({ apiKey: KEY, httpOptions: { baseUrl: gateway.url, retryOptions: { attempts: 1 } } as never })
  png = await upload(PNG, "pixel.png")
  pdf = await upload(PDF, "doc.pdf")
  txt = await upload(Buffer.from(TEXT), "notes.txt")
})
beforeEach(() => {
  chatUp.reset()
  messagesUp.reset()
  geminiUp.reset()
})
afterAll(async () => {
  await gateway?.close()
  await chatUp?.close()
  await messagesUp?.close()
  await geminiUp?.close()
})

// -------------------------------------------------------------------------------------------------

describe("chat completions: `file` parts with file.file_id", () => {
  it("takes any stored file: image as image_url, PDF as a file part, text as text", async () => {
    await client.chat.completions.create({
      model: "up/m",
      messages: [
        {
          role: "user",
          content: [
            { type: "text", text: "look" },
            { type: "file", file: { file_id: png } },
            { type: "file", file: { file_id: pdf } },
            { type: "file", file: { file_id: txt } }
          ]
        }
      ]
    })
    expect(chatUserParts()).toEqual([
      { type: "text", text: "look" },
      { type: "image_url", image_url: { url: PNG_URL } },
      { type: "file", file: { file_data: PDF_URL, filename: "doc.pdf" } },
      { type: "text", text: TEXT }
    ])
  })

  it("an unknown file_id is 404 `No such File object` naming the field; nothing goes upstream", async () => {
    const id = `file-${"1".repeat(32)}`
    const error = await rejection(
      client.chat.completions.create({ model: "up/m", messages: [{ role: "user", content: [{ type: "text", text: "x" }, { type: "file", file: { file_id: id } }] }] })
    )
    expect(error.status).toBe(404)
    expect(error.error).toMatchObject({ type: "invalid_request_error", message: `No such File object: ${id}`, param: "messages.0.content.1.file.file_id" })
    expect(chatUp.requests).toHaveLength(0)
  })
})

// -------------------------------------------------------------------------------------------------

describe("Responses: input_image / input_file with file_id", () => {
  it("input_image takes an image; input_file a PDF or a text file", async () => {
    await client.responses.create({
      model: "up/m",
      input: [
        {
          role: "user",
          content: [
            { type: "input_text", text: "read these" },
            { type: "input_image", file_id: png, detail: "low" },
            { type: "input_file", file_id: pdf },
            { type: "input_file", file_id: txt }
          ]
        }
      ]
    })
    expect(chatUserParts()).toEqual([
      { type: "text", text: "read these" },
      { type: "image_url", image_url: { url: PNG_URL, detail: "low" } },
      { type: "file", file: { file_data: PDF_URL, filename: "doc.pdf" } },
      { type: "text", text: TEXT }
    ])
  })

  it("a PDF as input_image is 400 invalid_file; an image as input_file too", async () => {
    const asImage = await rejection(client.responses.create({ model: "up/m", input: [{ role: "user", content: [{ type: "input_image", file_id: pdf, detail: "auto" }] }] }))
    expect(asImage.status).toBe(400)
    expect(asImage.error).toMatchObject({ code: "invalid_file", param: "input.0.content.0.file_id" })
    const asFile = await rejection(client.responses.create({ model: "up/m", input: [{ role: "user", content: [{ type: "input_file", file_id: png }] }] }))
    expect(asFile.status).toBe(400)
    expect(asFile.error.code).toBe("invalid_file")
    expect(chatUp.requests).toHaveLength(0)
  })

  it("a stored response keeps the file_id: chaining re-reads the file, and after it is deleted is 404", async () => {
    const memo = await upload(Buffer.from("the memo's words"), "memo.txt")
    const first = await client.responses.create({ model: "up/m", input: [{ role: "user", content: [{ type: "input_text", text: "keep" }, { type: "input_file", file_id: memo }] }] })
    const items = await client.responses.inputItems.list(first.id)
    expect(JSON.stringify(items.data)).toContain(memo)
    expect(JSON.stringify(items.data)).not.toContain("the memo's words")

    await client.responses.create({ model: "up/m", previous_response_id: first.id, input: "and again" })
    const history = (chatUp.requests[chatUp.requests.length - 1].body as Json).messages as Array<Json>
    expect(JSON.stringify(history)).toContain("the memo's words")

    await client.files.delete(memo)
    chatUp.reset()
    const error = await rejection(client.responses.create({ model: "up/m", previous_response_id: first.id, input: "once more" }))
    expect(error.status).toBe(404)
    expect(error.error).toMatchObject({ type: "invalid_request_error", message: `No such File object: ${memo}`, param: "previous_response_id" })
    expect(chatUp.requests).toHaveLength(0)
  })
})

// -------------------------------------------------------------------------------------------------

describe("Messages: image / document blocks with a file source", () => {
  const fileBlock = (type: "image" | "document", fileId: string, extra: Json = {}) => ({ type, source: { type: "file", file_id: fileId }, ...extra }) as never

  it("through a chat-completions upstream: image, PDF document, text document", async () => {
    await claude.messages.create({
      model: "up/m",
      max_tokens: 50,
      messages: [{ role: "user", content: [fileBlock("image", png), fileBlock("document", pdf), fileBlock("document", txt), { type: "text", text: "what is this" }] }]
    })
    expect(chatUserParts()).toEqual([
      { type: "image_url", image_url: { url: PNG_URL } },
      { type: "file", file: { file_data: PDF_URL, filename: "doc.pdf" } },
      { type: "text", text: TEXT },
      { type: "text", text: "what is this" }
    ])
  })

  it("through a native Messages upstream: base64 image and document, cache_control kept", async () => {
    await claude.messages.create({
      model: "claude/claude-x",
      max_tokens: 50,
      messages: [
        {
          role: "user",
          content: [
            fileBlock("image", png),
            fileBlock("document", pdf, { cache_control: { type: "ephemeral" } }),
            fileBlock("document", txt),
            { type: "text", text: "summarise" }
          ]
        }
      ]
    })
    expect(messagesUp.requests).toHaveLength(1)
    const body = messagesUp.requests[0].body as Json
    const user = (body.messages as Array<Json>).find((m) => m.role === "user")!
    // (the last block may carry the gateway's own cache breakpoint)
    expect(user.content.slice(0, 3)).toEqual([
      { type: "image", source: { type: "base64", media_type: "image/png", data: PNG.toString("base64") } },
      { type: "document", source: { type: "base64", media_type: "application/pdf", data: PDF.toString("base64") }, title: "doc.pdf", cache_control: { type: "ephemeral" } },
      { type: "text", text: TEXT }
    ])
    expect(user.content[3]).toMatchObject({ type: "text", text: "summarise" })
    expect(user.content).toHaveLength(4)
  })

  it("a wrong kind is 400: a PDF in an image block, an image in a document block", async () => {
    for (const [type, id] of [["image", pdf], ["document", png]] as const) {
      const error = await rejection(claude.messages.create({ model: "up/m", max_tokens: 10, messages: [{ role: "user", content: [fileBlock(type, id)] }] }))
      expect(error.status, type).toBe(400)
      expect(error.error.error.type).toBe("invalid_request_error")
      expect(error.error.error.message).toContain("messages.0.content.0.source.file_id")
    }
    expect(chatUp.requests).toHaveLength(0)
  })

  it("an unknown file is 404 `File not found: <id>`, also in count_tokens", async () => {
    const id = `file-${"2".repeat(32)}`
    const error = await rejection(claude.messages.create({ model: "up/m", max_tokens: 10, messages: [{ role: "user", content: [fileBlock("document", id)] }] }))
    expect(error.status).toBe(404)
    expect(error.error.error).toEqual({ type: "not_found_error", message: `File not found: ${id}` })
    const counted = await rejection(claude.messages.countTokens({ model: "up/m", messages: [{ role: "user", content: [fileBlock("image", id)] }] }))
    expect(counted.status).toBe(404)
    expect(chatUp.requests).toHaveLength(0)
  })
})

// -------------------------------------------------------------------------------------------------

describe("Gemini: fileData with files/<hex> or the upload's uri", () => {
  const fileData = (fileUri: string, mimeType?: string) => ({ fileData: { fileUri, ...(mimeType ? { mimeType } : {}) } })

  it("through a chat-completions upstream; the stored type wins over fileData.mimeType", async () => {
    const response = await ai.models.generateContent({
      model: "g-up",
      contents: [
        {
          role: "user",
          parts: [{ text: "look" }, fileData(`files/${hexOf(png)}`, "text/plain"), fileData(`${gateway.url}/v1beta/files/${hexOf(pdf)}`), fileData(`files/${hexOf(txt)}`, "application/pdf")]
        }
      ]
    })
    expect(response.text).toBe("Hello from upstream")
    expect(chatUserParts()).toEqual([
      { type: "text", text: "look" },
      { type: "image_url", image_url: { url: PNG_URL } },
      { type: "file", file: { file_data: PDF_URL, filename: "doc.pdf" } },
      { type: "text", text: TEXT }
    ])
  })

  it("the uri returned by an SDK upload names the file", async () => {
    const uploaded = await ai.files.upload({ file: new Blob(["uploaded through genai"], { type: "text/plain" }) })
    await ai.models.generateContent({ model: "g-up", contents: [{ role: "user", parts: [fileData(uploaded.uri!)] }] })
    expect(chatUserParts()).toEqual([{ type: "text", text: "uploaded through genai" }])
  })

  it("through a native generate-content upstream: inlineData of the stored type", async () => {
    await ai.models.generateContent({
      model: "g-native",
      contents: [{ role: "user", parts: [fileData(`files/${hexOf(png)}`), fileData(`files/${hexOf(pdf)}`), fileData(`files/${hexOf(txt)}`), { text: "describe" }] }]
    })
    expect(geminiUp.requests).toHaveLength(1)
    const contents = (geminiUp.requests[0].body as Json).contents as Array<Json>
    const parts = contents.filter((c) => c.role === "user").flatMap((c) => c.parts as Array<Json>)
    expect(parts).toEqual([
      { inlineData: { mimeType: "image/png", data: PNG.toString("base64") } },
      { inlineData: { mimeType: "application/pdf", data: PDF.toString("base64") } },
      { text: TEXT },
      { text: "describe" }
    ])
  })

  it("an unknown files/<hex> is 404 `File files/<hex> was not found`; nothing goes upstream", async () => {
    const hex = "3".repeat(32)
    const error = await rejection(ai.models.generateContent({ model: "g-up", contents: [{ role: "user", parts: [fileData(`files/${hex}`)] }] }))
    expect(error.status).toBe(404)
    expect(geminiBody(error).error).toEqual({ code: 404, status: "NOT_FOUND", message: `File files/${hex} was not found` })
    expect(chatUp.requests).toHaveLength(0)
  })
})

// -------------------------------------------------------------------------------------------------

describe("the per-request bound: 32 files, 50 MB at base64 size", () => {
  it("32 files are delivered; 33 are 400 files_too_large before anything is read or sent", async () => {
    const ids: Array<string> = []
    for (let i = 0; i < 33; i++) {
      const form = new FormData()
      form.append("purpose", "user_data")
      form.append("file", new Blob([`note ${i}`], { type: "text/plain" }), `n${i}.txt`)
      const res = await fetch(`${gateway.url}/v1/files`, { method: "POST", headers: { authorization: `Bearer ${KEY}` }, body: form })
      expect(res.status).toBe(200)
      ids.push(((await res.json()) as { id: string }).id)
    }
    const ask = (n: number) =>
      client.chat.completions.create({ model: "up/m", messages: [{ role: "user", content: ids.slice(0, n).map((id) => ({ type: "file" as const, file: { file_id: id } })) }] })

    await ask(32)
    expect(chatUserParts()).toHaveLength(32)
    expect(chatUserParts()[31]).toEqual({ type: "text", text: "note 31" })

    chatUp.reset()
    const error = await rejection(ask(33))
    expect(error.status).toBe(400)
    expect(error.error.code).toBe("files_too_large")
    expect(chatUp.requests).toHaveLength(0)

    // naming the same file twice counts it once
    await client.chat.completions.create({
      model: "up/m",
      messages: [{ role: "user", content: [...ids.slice(0, 32), ids[0]].map((id) => ({ type: "file" as const, file: { file_id: id } })) }]
    })
    expect(chatUserParts()).toHaveLength(33)
    for (const id of ids) await client.files.delete(id)
  })

  it("three 13 MB images (39 MB of bytes, 52 MB as base64) are 400 files_too_large in every protocol", async () => {
    const big = pngOfSize(13_000_000)
    const ids: Array<string> = []
    for (let i = 0; i < 3; i++) ids.push(await upload(big, `big-${i}.png`))

    const chat = await rejection(
      client.chat.completions.create({ model: "up/m", messages: [{ role: "user", content: ids.map((id) => ({ type: "file" as const, file: { file_id: id } })) }] })
    )
    expect(chat.status).toBe(400)
    expect(chat.error.code).toBe("files_too_large")

    const responses = await rejection(client.responses.create({ model: "up/m", input: [{ role: "user", content: ids.map((id) => ({ type: "input_image" as const, file_id: id, detail: "auto" as const })) }] }))
    expect(responses.status).toBe(400)
    expect(responses.error.code).toBe("files_too_large")

    const messages = await rejection(
      claude.messages.create({ model: "up/m", max_tokens: 10, messages: [{ role: "user", content: ids.map((id) => ({ type: "image", source: { type: "file", file_id: id } }) as never) }] })
    )
    expect(messages.status).toBe(400)
    expect(messages.error.error.type).toBe("invalid_request_error")
    expect(messages.error.error.message).toContain("50 MB")

    const gemini = await rejection(ai.models.generateContent({ model: "g-up", contents: [{ role: "user", parts: ids.map((id) => ({ fileData: { fileUri: `files/${hexOf(id)}` } })) }] }))
    expect(gemini.status).toBe(400)
    expect(geminiBody(gemini).error.status).toBe("INVALID_ARGUMENT")

    expect(chatUp.requests).toHaveLength(0)
    for (const id of ids) await client.files.delete(id)
  })
})
