/**
 * The gateway's JSON answers as the dashboard reads them. An answer is `unknown` until a decoder
 * here has read it into a typed value, keeping only the fields the page shows, or has thrown
 * naming the first place where it differs.
 */
type Decoder<A> = (value: unknown, at: string) => A;
type Fields = Readonly<Record<string, Decoder<unknown>>>;
type Decoded<F extends Fields> = { readonly [K in keyof F]: F[K] extends Decoder<infer A> ? A : never };

const isRecord = (v: unknown): v is Readonly<Record<string, unknown>> => typeof v === "object" && v !== null && !Array.isArray(v);
const isList = (v: unknown): v is ReadonlyArray<unknown> => Array.isArray(v);
const fail = (at: string, expected: string): never => { throw new TypeError(at + " is not " + expected); };
const number: Decoder<number> = (v, at) => (typeof v === "number" ? v : fail(at, "a number"));
const string: Decoder<string> = (v, at) => (typeof v === "string" ? v : fail(at, "a string"));
const nullable = <A>(d: Decoder<A>): Decoder<A | null> => (v, at) => (v === null ? null : d(v, at));
const optional = <A>(d: Decoder<A>): Decoder<A | undefined> => (v, at) => (v === undefined ? undefined : d(v, at));
const list = <A>(d: Decoder<A>): Decoder<ReadonlyArray<A>> => (v, at) => (isList(v) ? v.map((x, i) => d(x, at + "[" + i + "]")) : fail(at, "a list"));
const struct = <F extends Fields>(fields: F): Decoder<Decoded<F>> => (v, at) => {
  if (!isRecord(v)) return fail(at, "an object");
  const out: Record<string, unknown> = {};
  for (const [k, d] of Object.entries(fields)) out[k] = d(v[k], at + "." + k);
  // each field of F has just been read by its own decoder
  return out as Decoded<F>;
};
/** an answer the page does not read */
const ignored: Decoder<null> = () => null;

const totalsFields = { requests: number, errors: number, inputTokens: number, outputTokens: number, costUsd: nullable(number), unpricedCalls: number };
/** `costUsd` is null when no call of the group has a price */
type Totals = Decoded<typeof totalsFields>;
type Sums = { -readonly [K in keyof Totals]: number };
const SUMMED: ReadonlyArray<keyof Totals> = ["requests", "errors", "inputTokens", "outputTokens", "costUsd", "unpricedCalls"];
const zeroTotals = (): Sums => ({ requests: 0, errors: 0, inputTokens: 0, outputTokens: 0, costUsd: 0, unpricedCalls: 0 });
const plus = (a: Sums, t: Totals): Sums => { for (const k of SUMMED) a[k] += t[k] || 0; return a; };

/** `GET /gateway/usage` */
const Percentiles = struct({ p50: nullable(number), p90: nullable(number), p99: nullable(number) });
const UsageReport = struct({
  from: string, to: string, app: nullable(string), user: nullable(string),
  totals: struct({ ...totalsFields, cacheReadTokens: number, latencyMs: Percentiles, ttftMs: Percentiles }),
  days: list(struct({ day: string, models: list(struct({ ...totalsFields, model: string })), apps: list(struct({ ...totalsFields, app: string })) })),
  /** when the range is at most 7 days */
  hours: optional(list(struct({ ...totalsFields, hour: string }))),
  topUsers: list(struct({ ...totalsFields, user: string })),
  topSessions: list(struct({ ...totalsFields, session: string }))
});
type UsageReport = ReturnType<typeof UsageReport>;
type Day = UsageReport["days"][number];

/** `GET /gateway/status` */
const Stored = list(struct({ count: number, bytes: number }));
const Status = struct({
  version: string, uptimeSeconds: number,
  inFlight: struct({ requests: number, modelRequests: number, bodyBytes: number }),
  storedResponses: Stored, files: Stored,
  providers: list(struct({ name: string, type: string, recent: struct({ calls: number, failures: number, errorRate: number }) }))
});
type Status = ReturnType<typeof Status>;

/** `GET` and `POST /gateway/admin/keys` */
const keyFields = { id: string, app: string, created_at: string };
type RuntimeKey = Decoded<typeof keyFields>;
const KeyList = struct({ data: list(struct(keyFields)) });
const CreatedKey = struct({ ...keyFields, key: string });

/** `GET /gateway/admin/budgets`: a budget is in USD or in tokens */
const Budget = struct({ usd: optional(number), tokens: optional(number), per: string, limit: number, used: number, reserved: number, period_end: nullable(string) });
type Budget = ReturnType<typeof Budget>;
const Budgets = struct({ apps: list(struct({ app: string, budgets: list(Budget) })), keys: list(struct({ id: string, app: string, budgets: list(Budget) })) });
type Budgets = ReturnType<typeof Budgets>;

/** a refused call with its problem details' code and detail, or a failure of the page as the page shows it */
class ApiError extends Error {
  constructor(readonly status: number, readonly code: string, readonly detail: string) { super(detail); }
}
const asApiError = (e: unknown): ApiError => (e instanceof ApiError ? e : new ApiError(0, "page_error", e instanceof Error ? e.message : String(e)));
