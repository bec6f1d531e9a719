/**
 * Reporting a failure to Brain (`brain.fail`) without allocating, and making sure a large block
 * fits the memory before it is allocated, so that running out of memory is a failure that says
 * so, not a bare `unreachable` from the allocator. Imported by abi.ts (`fail`, `brainAbort`) and
 * by the JSON writer (json/write.ts); it imports nothing, so both can.
 */

// @ts-ignore: decorator
@external("brain", "fail")
declare function hostFail(msgPtr: usize, msgLen: usize): void

/** Room for a failure's text, reserved up front: reporting must not allocate (the heap may be why). */
const REPORT_BYTES: usize = 4096
const reportText = memory.data(<i32>REPORT_BYTES)
let reportLen: usize = 0
let reporting = false

/**
 * Sends `message (file:line:column)` to `brain.fail` as UTF-8, without allocating: cut at
 * REPORT_BYTES on a character boundary, a lone surrogate written as U+FFFD. A failure while
 * reporting traps (the activation fails all the same).
 */
export function report(message: string, fileName: string | null, line: u32, column: u32): void {
  if (reporting) unreachable()
  reporting = true
  reportLen = 0
  append(message)
  if (fileName !== null) {
    append(" (")
    append(fileName)
    append(":")
    appendNumber(line)
    append(":")
    appendNumber(column)
    append(")")
  }
  hostFail(reportText, reportLen)
  unreachable()
}

function append(s: string): void {
  for (let i = 0; i < s.length; i++) {
    let c = <u32>s.charCodeAt(i)
    if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length) {
      const next = <u32>s.charCodeAt(i + 1)
      if (next >= 0xdc00 && next <= 0xdfff) {
        if (reportLen + 4 > REPORT_BYTES) return
        const cp = 0x10000 + ((c - 0xd800) << 10) + (next - 0xdc00)
        const at = reportText + reportLen
        store<u8>(at, <u8>(0xf0 | (cp >>> 18)))
        store<u8>(at + 1, <u8>(0x80 | ((cp >>> 12) & 0x3f)))
        store<u8>(at + 2, <u8>(0x80 | ((cp >>> 6) & 0x3f)))
        store<u8>(at + 3, <u8>(0x80 | (cp & 0x3f)))
        reportLen += 4
        i++
        continue
      }
    }
    if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd
    const need: usize = c < 0x80 ? 1 : c < 0x800 ? 2 : 3
    if (reportLen + need > REPORT_BYTES) return
    const at = reportText + reportLen
    if (need == 1) store<u8>(at, <u8>c)
    else if (need == 2) {
      store<u8>(at, <u8>(0xc0 | (c >>> 6)))
      store<u8>(at + 1, <u8>(0x80 | (c & 0x3f)))
    } else {
      store<u8>(at, <u8>(0xe0 | (c >>> 12)))
      store<u8>(at + 1, <u8>(0x80 | ((c >>> 6) & 0x3f)))
      store<u8>(at + 2, <u8>(0x80 | (c & 0x3f)))
    }
    reportLen += need
  }
}

function appendNumber(n: u64): void {
  let div: u64 = 1
  while (n / div >= 10) div *= 10
  for (; div > 0; div /= 10) {
    if (reportLen >= REPORT_BYTES) return
    store<u8>(reportText + reportLen++, <u8>(48 + (n / div) % 10))
  }
}

/** The allocator's block header (AssemblyScript's BLOCK_OVERHEAD) and alignment slack, counted generously. */
const SLACK: u64 = 64

/** Where the allocator's next block starts: a block of none taken and given back (the stub runtime takes back its last block). */
export function heapEnd(): usize {
  const probe = heap.alloc(0)
  heap.free(probe)
  return probe
}

/**
 * Makes sure `bytes` more fit after `from` (the allocator's end when 0): grows the memory to hold
 * them now, and when it cannot grow so far, fails the activation with `what`, the bytes, `after`
 * and the bound (the lower of the module's declared maximum and BRAIN_MAX_WASM_MEMORY_BYTES).
 */
export function ensureRoom(bytes: usize, what: string, after: string, from: usize = 0): void {
  const need = <u64>(from != 0 ? from : heapEnd()) + <u64>bytes + SLACK
  const have = <u64>memory.size() << 16
  if (need <= have) return
  const pages = <i32>((need - have + 0xffff) >> 16)
  if (memory.grow(pages) >= 0) return
  if (reporting) unreachable()
  reporting = true
  reportLen = 0
  append(what)
  appendNumber(<u64>bytes)
  append(after)
  append(": it holds ")
  appendNumber(have)
  append(" bytes and cannot grow by the ")
  appendNumber(need - have)
  append(" more it needs (its maximum is the lower of the module's declared maximum and BRAIN_MAX_WASM_MEMORY_BYTES)")
  hostFail(reportText, reportLen)
  unreachable()
}
