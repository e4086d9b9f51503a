import { Chunk, Effect, Either, type Scope, Stream } from "effect"
import { addUsage, emptyUsage, foldEvents, type Answer, type ModelEvent, type Usage } from "../domain/Canonical.js"
import type { GatewayError } from "../domain/Errors.js"
import { rateLimitHeaders, type RateLimitView } from "../domain/Quota.js"
import { resolveStructured } from "../domain/Structured.js"
import { Reply, type RequestContext } from "../http/Route.js"
import { encodedPull, pulledBytes, streamResponse, utf8 } from "../http/Writer.js"
import type { ModelRunner, RunOptions, StartedRun } from "../services/runner/ModelRunner.js"
import type { HostToolLoop, LoopFacts, Refinish } from "../services/tools/Loop.js"
import { holdStructured, holdStructuredInStream } from "./HeldBack.js"
import { withKeepAlive } from "./KeepAlive.js"
import { targetName } from "../providers/Provider.js"

/**
 * The one answer writer of the model protocols. A protocol says how its answer looks — a JSON body
 * from folded answers, or a stream encoder — and this writes it: one run or several (choices,
 * candidates) merged, structured answers held back and resolved, JSON, SSE or JSON-array bodies.
 */

/** What a protocol knows of the runs behind an answer (for its headers). */
export type RunFacts = Pick<StartedRun, "target" | "sessionId" | "droppedParams" | "rateLimit">

/**
 * A target's name as a header value: a model named by the client may hold any character (NUL, line
 * breaks, non-ASCII), and Node refuses such a header outright. Each code unit outside visible ASCII
 * is percent-encoded (UTF-8, a lone surrogate as U+FFFD), and so is `%` itself.
 */
export const headerText = (text: string): string =>
  /^[\x21-\x24\x26-\x7e]*$/.test(text)
    ? text
    : text.replace(/[^\x21-\x24\x26-\x7e]/gu, (c) => (c.length === 1 && c.charCodeAt(0) >= 0xd800 && c.charCodeAt(0) <= 0xdfff ? "%EF%BF%BD" : encodeURIComponent(c)))

/**
 * The protocol's headers of an answer, with the target that answered (`x-gateway-target`:
 * `<provider>/<model>`, `#key<i>` for one of several keys; only for an answer of one run)
 * and the rate-limit headers of its runs (the tightest).
 */
const answerHeaders = (spec: AnswerSpec, runs: ReadonlyArray<RunFacts>): Record<string, string> => {
  const headers = spec.headers(runs)
  // with several choices or candidates none is named, as the spec says of the fan-out
  if (runs.length === 1) headers["x-gateway-target"] = headerText(targetName(runs[0].target))
  let view: RateLimitView | undefined
  for (const run of runs) {
    const v = run.rateLimit
    if (v !== undefined && (view === undefined || (v.requests?.remaining ?? Infinity) < (view.requests?.remaining ?? Infinity))) view = v
  }
  return view === undefined ? headers : rateLimitHeaders(view, spec.ctx.family === "messages", Date.now(), headers)
}

/** A run's events as the protocol shows them (stop sequences, rewrites): 0, 1 or more per event. */
export type EventFilter = (event: ModelEvent) => ReadonlyArray<ModelEvent>

/** The encoder of one run of a streamed answer. */
export interface RunEncoder {
  /** the text of one event (may be empty) */
  readonly event: (event: ModelEvent) => string
  /** the text after the run's last event */
  readonly end?: () => string
}

/** How a protocol streams an answer. */
export interface StreamEncoder {
  readonly contentType: string
  /** written with the first events */
  readonly start: string
  /** the encoder of run `index` */
  readonly run: (index: number) => RunEncoder
  /** the text after every run ended (`usage`: summed over the runs); it may store the answer first */
  readonly end: (usage: Usage) => Effect.Effect<string, GatewayError>
  /** a failure after the status was sent, as the body's last frame */
  readonly error: (error: GatewayError) => string
  /** a structured answer found missing is an error event after `start` (Messages), not an HTTP error */
  readonly missingStructuredInStream?: boolean
}

/** How a protocol answers one model request. */
export interface AnswerSpec {
  readonly ctx: RequestContext
  readonly run: RunOptions
  /** independent answers to the same request (choices, candidates); 1 when absent */
  readonly n?: number
  /** a fresh filter per run, applied to both forms before encoding or folding */
  readonly filter?: (index: number) => EventFilter
  /** the answer's headers from its runs */
  readonly headers: (runs: ReadonlyArray<RunFacts>) => Record<string, string>
  /** the JSON body of the whole answer: one folded (and resolved) answer per run, usage summed */
  readonly whole: (answers: ReadonlyArray<Answer>, usage: Usage) => Effect.Effect<unknown, GatewayError>
  /** the stream encoder (built only for a streamed answer) */
  readonly stream: () => StreamEncoder
  /** how the request is finished once host tools are added (Messages: its caching rules) */
  readonly refinish?: Refinish
}

const sumUsage = (usages: ReadonlyArray<Usage>): Usage => (usages.length === 1 ? usages[0] : usages.reduce(addUsage, emptyUsage))

/**
 * Write the answer `spec` describes: whole when its request does not stream, else as events come.
 * The app's host tools are offered first (the loop runs them); a whole answer says how many ran.
 */
export const writeAnswer = (loop: HostToolLoop["Type"], spec: AnswerSpec): Effect.Effect<Reply, GatewayError, Scope.Scope> =>
  Effect.flatMap(loop.prepare(spec.run, spec.refinish), (prepared) => {
    const ready = prepared.run === spec.run ? spec : { ...spec, run: prepared.run }
    return ready.run.request.stream ? streamed(prepared.runner, ready, loop.keepAliveMs) : whole(prepared.runner, ready, prepared.facts)
  })

const whole = (runner: ModelRunner["Type"], spec: AnswerSpec, facts?: LoopFacts) => {
  const n = spec.n ?? 1
  const complete = runner.complete(spec.run)
  const structured = spec.run.request.structured
  // several runs together (the first failure interrupts the others); one without a forEach
  const all = n === 1 ? Effect.map(complete, (run) => [run]) : Effect.forEach(Array.from({ length: n }), () => complete, { concurrency: "unbounded" })
  return Effect.flatMap(all, (runs) => {
    const answers: Array<Answer> = []
    let fallback = false
    for (let index = 0; index < runs.length; index++) {
      const filter = spec.filter?.(index)
      let answer = foldEvents(filter === undefined ? runs[index].events : runs[index].events.flatMap(filter))
      if (structured !== undefined) {
        const resolved = resolveStructured(answer, structured)
        if (resolved._tag === "error") return Effect.fail(resolved.error)
        answer = resolved.result.answer
        fallback ||= resolved.result.fallback
      }
      answers.push(answer)
    }
    const headers = answerHeaders(spec, runs)
    if (fallback) headers["x-gateway-structured-fallback"] = "text"
    if (facts !== undefined) headers["x-gateway-host-tool-calls"] = String(facts.hostCalls)
    return Effect.map(spec.whole(answers, sumUsage(answers.map((a) => a.usage))), (body) => Reply.json(body, { headers }))
  })
}

interface Started {
  /** every run, as started (for the headers) */
  readonly started: ReadonlyArray<StartedRun>
  /** each run to write (held back and replayed when structured), or why its structured answer is missing */
  readonly held: ReadonlyArray<Either.Either<StartedRun, GatewayError>>
}

/**
 * Every run started (each has its first events, or the request fails: an HTTP error), held back when
 * structured: before the stream commits, or (`inStream`, one run) on the committed stream.
 */
const startRuns = (runner: ModelRunner["Type"], spec: AnswerSpec, n: number, inStream = false): Effect.Effect<Started, GatewayError, Scope.Scope> => {
  const structured = spec.run.request.structured
  const start = runner.start(spec.run)
  // one run, not structured (nearly every request): no forEach, no hold
  if (n === 1 && structured === undefined) return Effect.map(start, (run) => ({ started: [run], held: [Either.right(run)] }))
  if (n === 1 && inStream && structured !== undefined) return Effect.map(start, (run) => ({ started: [run], held: [Either.right(holdStructuredInStream(run, structured))] }))
  return Effect.flatMap(Effect.forEach(Array.from({ length: n }), () => start, { concurrency: n > 1 ? "unbounded" : 1 }), (started) =>
    Effect.map(Effect.forEach(started, (run) => Effect.either(holdStructured(run, structured)), { concurrency: n > 1 ? "unbounded" : 1 }), (held) => ({ started, held }))
  )
}

/**
 * A streamed answer: every run started (its first events in hand) in the request's scope, which
 * holds the model calls open until the platform has written the body. From then on a run silent for
 * `keepAliveMs` (config `streamKeepAliveMs`) gives a keep-alive (spec rule 1.7). A structured
 * answer is held back before the stream commits, except on a protocol whose missing answer is an
 * error event in the stream (Messages): there the stream commits at the first event and carries
 * keep-alives while the answer is held.
 */
const streamed = (runner: ModelRunner["Type"], spec: AnswerSpec, keepAliveMs: number) => {
  const encoder = spec.stream()
  return Effect.flatMap(startRuns(runner, spec, spec.n ?? 1, encoder.missingStructuredInStream === true), ({ held, started }): Effect.Effect<Reply, GatewayError> => {
    const headers = { ...answerHeaders(spec, started), "content-type": encoder.contentType, "cache-control": "no-cache" }
    const runs: Array<StartedRun> = []
    for (const result of held) {
      if (Either.isRight(result)) {
        runs.push(result.right)
        continue
      }
      if (!encoder.missingStructuredInStream) return Effect.fail(result.left)
      return Effect.succeed(streamResponse(200, headers, utf8(Stream.make(encoder.start + encoder.error(result.left)))))
    }
    // each run's last usage (providers report running totals), summed at the end
    const usages: Array<Usage> = runs.map(() => emptyUsage)
    const runEncoders = runs.map((_, index) => encoder.run(index))
    const encode = (index: number) => {
      const run = runEncoders[index]
      const filter = spec.filter?.(index)
      return (event: ModelEvent): string => {
        if (event._tag === "Usage") usages[index] = event.usage
        if (filter === undefined) return run.event(event)
        let text = ""
        for (const shown of filter(event)) text += run.event(shown)
        return text
      }
    }
    const end = Effect.suspend(() => encoder.end(sumUsage(usages)))

    if (runs.length === 1) {
      // one run: its pull straight to the socket, no stream stages and no merge
      const event = encode(0)
      const runEnd = runEncoders[0].end
      const body = encodedPull(withKeepAlive(runs[0].pull, keepAliveMs), {
        start: encoder.start,
        encode: (chunk: Chunk.Chunk<ModelEvent>) => {
          let text = ""
          for (const e of chunk) text += event(e)
          return text
        },
        end: runEnd === undefined ? end : Effect.map(end, (after) => runEnd() + after),
        error: encoder.error
      })
      return Effect.succeed(streamResponse(200, headers, pulledBytes(body)))
    }
    const merged = Stream.mergeAll(
      runs.map((run, index) => {
        const runEnd = runEncoders[index].end
        const events = Stream.map(Stream.repeatEffectChunkOption(withKeepAlive(run.pull, keepAliveMs)), encode(index))
        return runEnd === undefined ? events : Stream.concat(events, Stream.sync(runEnd))
      }),
      { concurrency: "unbounded" }
    )
    const body = Stream.make(encoder.start).pipe(
      Stream.concat(merged),
      Stream.concat(Stream.fromEffect(end)),
      Stream.catchAll((error) => Stream.make(encoder.error(error)))
    )
    return Effect.succeed(streamResponse(200, headers, utf8(body)))
  })
}
