/**
 * What the Files suites share: the file bodies (recognised by their first bytes or as text), the
 * id formats of spec 2.4, and a reader for an SDK call that must fail.
 */
import { expect } from "vitest"

/** A 1×1 PNG. */
export const PNG = Buffer.from("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==", "base64")

/** A tiny PDF (only the `%PDF-` start matters to the gateway). */
export const PDF = Buffer.from("%PDF-1.4\n1 0 obj << >> endobj\ntrailer << >>\n%%EOF\n", "latin1")

export const TEXT = "remember the milk"

/** `size` bytes that start like a PNG (the rest zeros): a large image without building one. */
export const pngOfSize = (size: number): Buffer => {
  const out = Buffer.alloc(size)
  PNG.copy(out, 0, 0, 16)
  return out
}

export const FILE_ID = /^file-[0-9a-f]{32}$/
export const GEMINI_NAME = /^files\/[0-9a-f]{32}$/

/** `file-<hex>` → `<hex>` */
export const hexOf = (id: string): string => id.slice("file-".length)

/** The part of the accepted-kinds sentence every refused upload names. */
export const ACCEPTED = "PNG, JPEG, GIF or WebP images, PDF, or UTF-8 text"

/** The error a promise rejects with; fails the test when it resolves. */
export const rejection = async (promise: Promise<unknown>): Promise<any> => {
  try {
    await promise
  } catch (error) {
    return error
  }
  expect.fail("expected the call to fail")
}

/** The Gemini SDK's ApiError carries the JSON body as its message. */
export const geminiBody = (error: { readonly message: string }): { error: { code: number; message: string; status: string } } => JSON.parse(error.message)
