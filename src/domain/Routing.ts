import { createHash, type Hash } from "node:crypto"
import type { CanonicalRequest, Message } from "./Canonical.js"

/**
 * The pure parts of routing: the key a conversation is recognised by, the order a conversation's
 * key gives the targets (the same on every replica), and a weighted random order.
 */

/** 32-bit FNV-1a of a string. */
export const fnv1a = (text: string): number => {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return h >>> 0
}

/** murmur3's 32-bit finaliser: every input bit moves every output bit. */
const mix = (x: number): number => {
  let h = x >>> 0
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}

const addMessage = (hash: Hash, message: Message): void => {
  hash.update(message.role)
  for (const part of message.parts) {
    hash.update("\u0000")
    switch (part.type) {
      case "text":
      case "reasoning":
        hash.update(part.text)
        break
      case "image":
        hash.update(part.url)
        break
      case "file":
        hash.update(part.data)
        break
      case "tool_call":
        hash.update(part.name)
        hash.update(part.arguments)
        break
      case "tool_result":
        for (const c of part.content) hash.update(c.type === "text" ? c.text : c.url)
        break
    }
  }
}

/** A conversation's key: 64 bits of a digest, as two words, and as text for per-replica memory. */
export interface ConversationKey {
  readonly text: string
  readonly hi: number
  readonly lo: number
}

/**
 * The key of the conversation a request belongs to: the client's own conversation id when it
 * sends one (`prompt_cache_key`, `metadata.user_id`), else a digest of what every turn of a
 * conversation repeats: the first part of the system prompt as the client sent it, and the first
 * message (a client that keeps a prompt cache warm sends that prefix unchanged). Only the first
 * system part: system and developer messages met later in a history join the system prompt, and
 * a conversation must not move when one is added. Cache markers are not part of it: clients move
 * them from turn to turn. Undefined for a request with neither (nothing to recognise).
 */
export const conversationKey = (request: CanonicalRequest, pinned: string | undefined): ConversationKey | undefined => {
  const hash = createHash("sha1")
  if (pinned !== undefined && pinned !== "") hash.update("pin\u0000").update(pinned)
  else {
    const first = request.messages[0]
    const system = request.system[0]
    if (first === undefined && system === undefined) return undefined
    hash.update("history\u0000")
    if (system !== undefined) hash.update(system.text)
    hash.update("\u0001")
    if (first !== undefined) addMessage(hash, first)
  }
  const digest = hash.digest()
  return { text: digest.toString("hex", 0, 12), hi: digest.readUInt32BE(0), lo: digest.readUInt32BE(4) }
}

/** A number in (0, 1) from a key and a target's hash: independent per target, the same everywhere. */
const uniform = (key: ConversationKey, targetHash: number): number => {
  const a = mix(key.hi ^ targetHash)
  const b = mix(key.lo ^ mix(targetHash ^ 0x9e3779b9) ^ a)
  // 53 bits, never 0 or 1
  return ((a >>> 0) * 2 ** 21 + (b >>> 11) + 0.5) / 2 ** 53
}

/**
 * The targets in the order a conversation takes them: weighted rendezvous (highest random weight)
 * hashing. Each target scores `-weight / ln(u)` with `u` drawn from the key and the target's name,
 * and the highest score goes first: a target is first for a share of conversations equal to its
 * share of the weights, every replica computes the same order without asking the others, and when
 * a target leaves, only its conversations move (each to its own next choice).
 */
export const rendezvousOrder = <T>(key: ConversationKey, targets: ReadonlyArray<T>, names: ReadonlyArray<string>, weights: ReadonlyArray<number>): ReadonlyArray<T> => {
  const scored = targets.map((target, i) => ({ target, score: -weights[i] / Math.log(uniform(key, fnv1a(names[i]))) }))
  scored.sort((x, y) => y.score - x.score)
  return scored.map((s) => s.target)
}

/**
 * A weighted random order (sampling without replacement, Efraimidis and Spirakis): the first is
 * each target in proportion to its weight, and so is each next one among those left.
 */
export const weightedOrder = <T>(targets: ReadonlyArray<T>, weights: ReadonlyArray<number>, random: () => number): ReadonlyArray<T> => {
  if (targets.length === 2) {
    // the common case without sorting: P(first) = w0 / (w0 + w1)
    return random() * (weights[0] + weights[1]) < weights[0] ? targets : [targets[1], targets[0]]
  }
  // -ln(u) / w is exponential with rate w: the smallest first
  const keyed = targets.map((target, i) => ({ target, key: -Math.log(1 - random()) / weights[i] }))
  keyed.sort((x, y) => x.key - y.key)
  return keyed.map((k) => k.target)
}
