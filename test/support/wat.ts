/**
 * Guest modules for tests, written in WebAssembly text (WAT) and compiled in the test with wabt.
 * `guest(body)` wraps a body in the ABI's plumbing: the imported memory, `brain.call`, a bump
 * allocator (`brain_alloc`) and the version marker; the body defines `brain_run` or `brain_tool`.
 * Helpers: `$out(ptr, len)` packs a (ptr, len) pair; data segments hold fixed texts.
 */
import wabtInit from "wabt"

let wabt: Awaited<ReturnType<typeof wabtInit>> | undefined

/** Compiles WAT text to module bytes. */
export const wat = async (text: string): Promise<Uint8Array> => {
  wabt ??= await wabtInit()
  const module = wabt.parseWat("guest.wat", text, { mutable_globals: true, bulk_memory: true })
  try {
    return new Uint8Array(module.toBinary({}).buffer)
  } finally {
    module.destroy()
  }
}

/** The ABI's plumbing around `body` (WAT module fields). */
export const guest = (body: string, options: { readonly imports?: string; readonly marker?: boolean } = {}) => `
(module
  (import "env" "memory" (memory $mem 1))
  (import "brain" "call" (func $call (param i32 i32 i32 i32) (result i64)))
  ${options.imports ?? ""}
  ${options.marker === false ? "" : `(global (export "brain_abi_v1") i32 (i32.const 1))`}
  (global $heap (mut i32) (i32.const 4096))
  (func $alloc (export "brain_alloc") (param $n i32) (result i32)
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

/** A valid Agentloop guest (ABI version 1) that answers every turn with `{"ok": "hello from wasm"}`. */
export const helloLoop = async (): Promise<Uint8Array> => {
  const out = data(100, '{"ok":"hello from wasm"}')
  return wat(guest(`${out.segment}
    (func (export "brain_run") (param i32 i32) (result i64) (call $out (i32.const ${out.ptr}) (i32.const ${out.len})))`))
}

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
