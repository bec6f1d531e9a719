/**
 * Guest modules for tests, written in WebAssembly text (WAT) and compiled in the test with wabt.
 * `guest(body)` wraps a body in the ABI's plumbing: the imported memory, `brain.call`, a bump
 * allocator (`brain_alloc`) and the version marker; the body defines `brain_run` or `brain_tool`.
 * Helpers: `$out(ptr, len)` packs a (ptr, len) pair; data segments hold fixed texts.
 */
import wabtInit from "wabt"

let wabt: Awaited<ReturnType<typeof wabtInit>> | undefined

/**
 * Compiles WAT text to module bytes; `features` turns on more of wabt's proposals (`threads` for a
 * shared memory, `reference_types` for `table.set`); `names` writes the module's `name` section
 * (its functions' and globals' `$names`).
 */
export const wat = async (
  text: string,
  features: { readonly threads?: boolean; readonly reference_types?: boolean; readonly names?: boolean } = {}
): Promise<Uint8Array> => {
  wabt ??= await wabtInit()
  const { names, ...proposals } = features
  const module = wabt.parseWat("guest.wat", text, { mutable_globals: true, bulk_memory: true, ...proposals })
  try {
    return new Uint8Array(module.toBinary({ write_debug_names: names === true }).buffer)
  } finally {
    module.destroy()
  }
}

/** What `guest` puts around a body besides the plumbing, or leaves out of it. */
export interface GuestOptions {
  readonly imports?: string
  readonly marker?: boolean
  readonly memory?: string
  readonly ownMemory?: boolean
  readonly alloc?: boolean
  /** Exports `brain_transcript_tail`: a loop that reads the transcript's tail. */
  readonly tail?: boolean
  /** Exports `brain_transcript_tail_length` with this WAT global type and initializer (`i32 (i32.const 3)`). */
  readonly tailLength?: string
  /** Exports `brain_events_from_end`: a loop whose input Events start at the previous activation's end. */
  readonly eventsFromEnd?: boolean
  /** Exports `brain_configuration_unread`: a loop whose input leaves out the session's configuration. */
  readonly configurationUnread?: boolean
  /** Exports `brain_runtime_unread`: a loop whose input leaves out the runtime envelope. */
  readonly runtimeUnread?: boolean
  /** Exports `brain_model_metadata_unread`: a loop whose `model` answers leave out their metadata. */
  readonly modelMetadataUnread?: boolean
  /** Exports a global `brain_events_kind_<kind>` for each: a loop whose input Events are of those kinds only. */
  readonly eventKinds?: ReadonlyArray<string>
}

/**
 * The ABI's plumbing around `body` (WAT module fields). Options break it on purpose, for admission
 * tests: `memory` is the limits of the `env.memory` import (default `1`: one page, no maximum),
 * `ownMemory` defines the memory in the module instead of importing it, `marker: false` leaves
 * out `brain_abi_v1`, `alloc: false` leaves out `brain_alloc`'s export.
 */
export const guest = (body: string, options: GuestOptions = {}) => `
(module
  ${options.ownMemory === true ? "" : `(import "env" "memory" (memory $mem ${options.memory ?? "1"}))`}
  (import "brain" "call" (func $call (param i32 i32 i32 i32) (result i64)))
  ${options.imports ?? ""}
  ${options.ownMemory === true ? `(memory $mem ${options.memory ?? "1"})` : ""}
  ${options.marker === false ? "" : `(global (export "brain_abi_v1") i32 (i32.const 1))`}
  ${options.tail === true ? `(global (export "brain_transcript_tail") i32 (i32.const 1))` : ""}
  ${options.tailLength !== undefined ? `(global (export "brain_transcript_tail_length") ${options.tailLength})` : ""}
  ${options.eventsFromEnd === true ? `(global (export "brain_events_from_end") i32 (i32.const 1))` : ""}
  ${options.configurationUnread === true ? `(global (export "brain_configuration_unread") i32 (i32.const 1))` : ""}
  ${options.runtimeUnread === true ? `(global (export "brain_runtime_unread") i32 (i32.const 1))` : ""}
  ${options.modelMetadataUnread === true ? `(global (export "brain_model_metadata_unread") i32 (i32.const 1))` : ""}
  ${(options.eventKinds ?? []).map((kind) => `(global (export "brain_events_kind_${kind}") i32 (i32.const 1))`).join("\n  ")}
  (global $heap (mut i32) (i32.const 4096))
  (func $alloc ${options.alloc === false ? "" : `(export "brain_alloc")`} (param $n i32) (result i32)
    (local $p i32)
    (local.set $p (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get $n)))
    ;; grow to fit: one more page than needed each time
    (block $fits
      (br_if $fits (i32.le_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536))))
      (if (i32.lt_s (memory.grow (i32.add (i32.div_u (i32.sub (global.get $heap) (i32.mul (memory.size) (i32.const 65536))) (i32.const 65536)) (i32.const 1))) (i32.const 0))
        (then unreachable)))
    (local.get $p))
  (func $out (param $p i32) (param $l i32) (result i64)
    (i64.or (i64.shl (i64.extend_i32_u (local.get $p)) (i64.const 32)) (i64.extend_i32_u (local.get $l))))
  ${body}
)`

/** A data segment at `at` holding `text`, and the (ptr, len) of it as WAT operands. */
export const data = (at: number, text: string) => {
  const bytes = Buffer.from(text, "utf8")
  const escaped = [...bytes].map((b) => `\\${b.toString(16).padStart(2, "0")}`).join("")
  return { segment: `(data (i32.const ${at}) "${escaped}")`, ptr: at, len: bytes.length }
}

/** The export a guest's body defines: an Agentloop's or a tool's. */
export type Entry = "brain_run" | "brain_tool"

/** A guest whose `entry` returns `output` (any text, JSON or not). */
export const returning = (output: string, entry: Entry = "brain_run") => {
  const out = data(100, output)
  return guest(`${out.segment}
    (func (export "${entry}") (param i32 i32) (result i64) (call $out (i32.const ${out.ptr}) (i32.const ${out.len})))`)
}

/** A guest that makes one host call and returns its answer as its output. */
export const calling = (op: string, request: string, entry: Entry = "brain_run", options: Pick<GuestOptions, "tail" | "modelMetadataUnread"> = {}) => {
  const o = data(200, op)
  const r = data(300, request)
  return guest(`${o.segment} ${r.segment}
    (func (export "${entry}") (param i32 i32) (result i64)
      (call $call (i32.const ${o.ptr}) (i32.const ${o.len}) (i32.const ${r.ptr}) (i32.const ${r.len})))`, options)
}

/**
 * A guest whose `entry` answers `{"ok": <its input>}`: the output holds the input it was given,
 * whole. With `first`, it makes that host call before (and drops its answer).
 */
export const echoing = (
  entry: Entry = "brain_run",
  first?: { readonly op: string; readonly request: string },
  options: Pick<GuestOptions, "tail" | "tailLength" | "eventsFromEnd" | "configurationUnread" | "runtimeUnread" | "eventKinds"> = {}
) => {
  const o = data(200, first?.op ?? "")
  const r = data(300, first?.request ?? "")
  return guest(`${data(100, '{"ok":').segment} ${data(110, "}").segment} ${first ? `${o.segment} ${r.segment}` : ""}
  (func (export "${entry}") (param $ip i32) (param $il i32) (result i64)
    (local $p i32)
    ${first ? `(drop (call $call (i32.const ${o.ptr}) (i32.const ${o.len}) (i32.const ${r.ptr}) (i32.const ${r.len})))` : ""}
    (local.set $p (call $alloc (i32.add (local.get $il) (i32.const 7))))
    (memory.copy (local.get $p) (i32.const 100) (i32.const 6))
    (memory.copy (i32.add (local.get $p) (i32.const 6)) (local.get $ip) (local.get $il))
    (memory.copy (i32.add (local.get $p) (i32.add (local.get $il) (i32.const 6))) (i32.const 110) (i32.const 1))
    (call $out (local.get $p) (i32.add (local.get $il) (i32.const 7))))`, options)
}

/** A valid Agentloop guest (ABI version 1) that answers every turn with `{"ok": "hello from wasm"}`. */
export const helloLoop = (): Promise<Uint8Array> => wat(returning('{"ok":"hello from wasm"}'))

/** `bytes` with a custom section of `size` bytes appended: still a valid module, just larger. */
export const padded = (bytes: Uint8Array, size: number): Uint8Array => {
  const name = Buffer.from("pad")
  const payload = Buffer.alloc(size)
  const content = Buffer.concat([Buffer.from([name.length]), name, payload])
  const leb: Array<number> = []
  let n = content.length
  do {
    let byte = n & 0x7f
    n >>>= 7
    if (n !== 0) byte |= 0x80
    leb.push(byte)
  } while (n !== 0)
  return new Uint8Array(Buffer.concat([Buffer.from(bytes), Buffer.from([0, ...leb]), content]))
}
