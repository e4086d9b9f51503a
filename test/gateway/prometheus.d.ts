/** Types of the `parse-prometheus-text-format` package (it ships none). */
declare module "parse-prometheus-text-format" {
  export interface PrometheusSample {
    readonly value?: string
    readonly labels?: Readonly<Record<string, string>>
    readonly buckets?: Readonly<Record<string, string>>
    readonly quantiles?: Readonly<Record<string, string>>
    readonly count?: string
    readonly sum?: string
    readonly timestamp_ms?: string
  }
  export interface PrometheusFamily {
    readonly name: string
    readonly help: string
    readonly type: "COUNTER" | "GAUGE" | "HISTOGRAM" | "SUMMARY" | "UNTYPED"
    readonly metrics: ReadonlyArray<PrometheusSample>
  }
  /** Throws on a line that is not the text format. */
  export default function parsePrometheusTextFormat(text: string): Array<PrometheusFamily>
}
