import type { ModelEvent } from "../domain/Canonical.js"

/**
 * Stop sequences matched by the gateway on answer text (Messages `stop_sequences`, Gemini
 * `stopSequences`): across chunk boundaries, never on reasoning. The answer ends at the first
 * match; the text before it is kept, the sequence removed and reported. A tool call before the
 * match makes the turn a tool turn with no stop sequence; later text and calls are dropped; usage
 * still passes (it covers the whole run).
 */

export interface TextMatcher {
  /** text that can be released now, and the sequence when this piece completed a match */
  readonly push: (text: string) => { readonly emit: string; readonly matched?: string }
  /** at the end: the text held back, cut at a match that was waiting on a longer sequence */
  readonly flush: () => { readonly emit: string; readonly matched?: string }
}

export const makeTextMatcher = (stops: ReadonlyArray<string>): TextMatcher => {
  const sequences = stops.filter((s) => s.length > 0)
  const longest = sequences.reduce((n, s) => Math.max(n, s.length), 0)
  let pending = ""
  let done = false

  /** The earliest complete match (the first listed sequence wins a tie). */
  const earliest = (buffer: string): { readonly at: number; readonly which: string } => {
    let at = -1
    let which = ""
    for (const s of sequences) {
      const i = buffer.indexOf(s)
      if (i >= 0 && (at < 0 || i < at)) {
        at = i
        which = s
      }
    }
    return { at, which }
  }

  /**
   * Whether a sequence that would win over `match` may still complete: one starting earlier whose
   * start runs to the end of the buffer, or one starting at the same place and listed before it.
   */
  const mayStillWin = (buffer: string, match: { readonly at: number; readonly which: string }): boolean => {
    const rank = sequences.indexOf(match.which)
    for (let i = Math.max(0, buffer.length - longest + 1); i < buffer.length && i <= match.at; i++) {
      const tail = buffer.slice(i)
      if (sequences.some((s, k) => s.length > tail.length && s.startsWith(tail) && (i < match.at || k < rank))) return true
    }
    return false
  }

  /** The earliest position from which the rest of the buffer is a proper prefix of a sequence. */
  const partialFrom = (buffer: string): number => {
    for (let i = Math.max(0, buffer.length - longest + 1); i < buffer.length; i++) {
      const tail = buffer.slice(i)
      if (sequences.some((s) => s.length > tail.length && s.startsWith(tail))) return i
    }
    return -1
  }

  return {
    push: (text) => {
      if (done) return { emit: "" }
      const buffer = pending + text
      const match = earliest(buffer)
      if (match.at >= 0 && !mayStillWin(buffer, match)) {
        done = true
        pending = ""
        return { emit: buffer.slice(0, match.at), matched: match.which }
      }
      // no decision yet: release only the text before anything that may still start a match
      const partial = partialFrom(buffer)
      const hold = match.at >= 0 ? Math.min(match.at, partial >= 0 ? partial : match.at) : partial >= 0 ? partial : buffer.length
      pending = buffer.slice(hold)
      return { emit: buffer.slice(0, hold) }
    },
    flush: () => {
      if (done) return { emit: "" }
      done = true
      const rest = pending
      pending = ""
      const match = earliest(rest)
      return match.at >= 0 ? { emit: rest.slice(0, match.at), matched: match.which } : { emit: rest }
    }
  }
}

export interface StopFilter {
  /** the events to pass on for one model event */
  readonly event: (event: ModelEvent) => ReadonlyArray<ModelEvent>
  /** the matched sequence, once the answer ended on one with no tool call before it */
  readonly matched: () => string | undefined
}

export const makeStopFilter = (stops: ReadonlyArray<string>): StopFilter => {
  const matcher = makeTextMatcher(stops)
  let matched: string | undefined
  let called = false
  return {
    event: (event) => {
      switch (event._tag) {
        case "TextDelta": {
          if (matched !== undefined) return []
          const out = matcher.push(event.text)
          if (out.matched !== undefined) matched = out.matched
          return out.emit === "" ? [] : [{ _tag: "TextDelta", text: out.emit }]
        }
        case "ToolCall":
          if (matched !== undefined) return []
          called = true
          return [event]
        case "Finish": {
          const rest = matched === undefined ? matcher.flush() : { emit: "" }
          if (rest.matched !== undefined) matched = rest.matched
          const finish: ModelEvent =
            matched !== undefined ? { _tag: "Finish", reason: called ? "tool_calls" : "stop" } : event
          return rest.emit === "" ? [finish] : [{ _tag: "TextDelta", text: rest.emit }, finish]
        }
        default:
          return [event]
      }
    },
    matched: () => (called ? undefined : matched)
  }
}
