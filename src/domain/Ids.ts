import { randomBytes } from "node:crypto"

/** 32 hex characters from the CSPRNG (128 bits). Buffered to keep the hot path cheap. */
let pool = Buffer.alloc(0)
let offset = 0
export const randomHex = (bytes = 16): string => {
  if (offset + bytes > pool.length) {
    pool = randomBytes(4096)
    offset = 0
  }
  const hex = pool.toString("hex", offset, offset + bytes)
  offset += bytes
  return hex
}

export const Ids = {
  request: () => `req_${randomHex(12)}`,
  session: () => `ses_${randomHex()}`,
  chatCompletion: () => `chatcmpl-${randomHex(12)}`,
  completion: () => `cmpl-${randomHex(12)}`,
  toolCall: () => `call_${randomHex(12)}`
} as const
