/**
 * Decimal text to the nearest double, correctly rounded (ties to even), as JavaScript reads it.
 *
 * AssemblyScript's `parseFloat` is not always nearest (one random double in about a hundred comes
 * back off, some by far), so it is not used. Instead a quick guess (the first 19 digits times a
 * power of ten) brackets the answer, and a binary search over the doubles' bit patterns finds the
 * first double the exact value does not lie above the upper midpoint of, comparing in integer
 * arithmetic. A guess outside the bracket only makes the search longer (at most 63 steps).
 *
 * Rules:
 * - The input is JSON number text (json/parse.ts checked it).
 * - Past MAX_DIGITS significant digits the rest only count as "a little more" (a sticky bit), which
 *   still rounds exactly unless the kept digits sit exactly on a midpoint — far beyond any real use.
 * - Values past the largest double become Infinity, below half the smallest one 0, as in JavaScript.
 */

const MAX_DIGITS: i32 = 800

/** An unsigned big integer: 32-bit limbs, least significant first. */
class Big {
  limbs: Array<u32> = [0]

  mulSmall(m: u32): void {
    let carry: u64 = 0
    for (let i = 0; i < this.limbs.length; i++) {
      const p = <u64>unchecked(this.limbs[i]) * <u64>m + carry
      unchecked((this.limbs[i] = <u32>p))
      carry = p >>> 32
    }
    if (carry != 0) this.limbs.push(<u32>carry)
  }

  addSmall(a: u32): void {
    let carry: u64 = a
    for (let i = 0; i < this.limbs.length && carry != 0; i++) {
      const s = <u64>unchecked(this.limbs[i]) + carry
      unchecked((this.limbs[i] = <u32>s))
      carry = s >>> 32
    }
    if (carry != 0) this.limbs.push(<u32>carry)
  }

  mulPow5(k: i32): void {
    for (; k >= 13; k -= 13) this.mulSmall(1220703125) // 5^13
    let m: u32 = 1
    for (; k > 0; k--) m *= 5
    if (m != 1) this.mulSmall(m)
  }

  shl(k: i32): void {
    const words = k >>> 5
    const bits = k & 31
    if (bits != 0) {
      let carry: u32 = 0
      for (let i = 0; i < this.limbs.length; i++) {
        const v = unchecked(this.limbs[i])
        unchecked((this.limbs[i] = (v << bits) | carry))
        carry = v >>> (32 - bits)
      }
      if (carry != 0) this.limbs.push(carry)
    }
    if (words > 0) {
      const shifted = new Array<u32>(words)
      for (let i = 0; i < words; i++) unchecked((shifted[i] = 0))
      this.limbs = shifted.concat(this.limbs)
    }
  }

  /** -1, 0 or 1 as this is less than, equal to or greater than `other`. */
  compare(other: Big): i32 {
    let n = this.limbs.length
    let m = other.limbs.length
    while (n > 1 && unchecked(this.limbs[n - 1]) == 0) n--
    while (m > 1 && unchecked(other.limbs[m - 1]) == 0) m--
    if (n != m) return n < m ? -1 : 1
    for (let i = n - 1; i >= 0; i--) {
      const a = unchecked(this.limbs[i])
      const b = unchecked(other.limbs[i])
      if (a != b) return a < b ? -1 : 1
    }
    return 0
  }
}

/** The decimal value as digits × 10^exponent, with a sticky bit for dropped non-zero digits. */
class Decimal {
  digits: Big = new Big()
  count: i32 = 0
  exponent: i32 = 0
  sticky: bool = false
  /** The first 19 significant digits, for the guess, and how many digits came after them. */
  lead: u64 = 0
  dropped: i32 = 0
}

function readDecimal(text: string): Decimal {
  const d = new Decimal()
  const n = text.length
  let i = text.charCodeAt(0) == 45 ? 1 : 0
  let afterPoint = false
  for (; i < n; i++) {
    const c = text.charCodeAt(i)
    if (c == 46) { // .
      afterPoint = true
      continue
    }
    if (c == 101 || c == 69) break // e E
    const digit = <u32>(c - 48)
    if (d.count == 0 && digit == 0) {
      if (afterPoint) d.exponent--
      continue
    }
    if (d.count < 19) d.lead = d.lead * 10 + digit
    else d.dropped++
    if (d.count < MAX_DIGITS) {
      d.digits.mulSmall(10)
      d.digits.addSmall(digit)
      d.count++
      if (afterPoint) d.exponent--
    } else {
      if (digit != 0) d.sticky = true
      if (!afterPoint) d.exponent++
      d.dropped-- // counted above, but already in the exponent
    }
  }
  if (i < n) {
    i++
    let negative = false
    const sign = text.charCodeAt(i)
    if (sign == 45 || sign == 43) {
      negative = sign == 45
      i++
    }
    let e = 0
    for (; i < n; i++) {
      if (e < 100000) e = e * 10 + (text.charCodeAt(i) - 48)
    }
    d.exponent += negative ? -e : e
  }
  return d
}

/**
 * Compares the decimal with (2·mant + 1) × 2^(exp - 1), the midpoint above the double
 * mant × 2^exp: -1 below, 0 on it, 1 above.
 */
function compareWithMidpoint(d: Decimal, mant: u64, exp: i32): i32 {
  const lhs = new Big()
  lhs.limbs = d.digits.limbs.slice(0)
  const rhs = new Big()
  const m = mant * 2 + 1
  rhs.limbs = [<u32>m, <u32>(m >>> 32)]
  const e2 = exp - 1
  // lhs = digits · 10^E, rhs = m · 2^e2; move negative powers to the other side.
  if (d.exponent >= 0) {
    lhs.mulPow5(d.exponent)
    lhs.shl(d.exponent)
  } else {
    rhs.mulPow5(-d.exponent)
    rhs.shl(-d.exponent)
  }
  if (e2 >= 0) rhs.shl(e2)
  else lhs.shl(-e2)
  const c = lhs.compare(rhs)
  return c == 0 && d.sticky ? 1 : c
}

/** The double nearest the JSON number `text`. */
export function decimalToF64(text: string): f64 {
  const negative = text.charCodeAt(0) == 45
  const d = readDecimal(text)
  let result: f64
  if (d.count == 0) result = 0
  else if (d.count + d.exponent > 310) result = Infinity
  else if (d.count + d.exponent < -330) result = 0
  else result = nearest(d)
  return negative ? -result : result
}

const INFINITY_BITS: u64 = 0x7ff0000000000000

/** Whether the decimal rounds to the double with bit pattern `bits` or below (ties to even). */
function roundsAtOrBelow(d: Decimal, bits: u64): bool {
  if (bits >= INFINITY_BITS) return true
  const biased = <i32>(bits >>> 52)
  const fraction = bits & 0xfffffffffffff
  const mant = biased == 0 ? fraction : fraction | 0x10000000000000
  const c = compareWithMidpoint(d, mant, (biased == 0 ? 1 : biased) - 1075)
  return c < 0 || (c == 0 && (mant & 1) == 0)
}

function nearest(d: Decimal): f64 {
  // lead × 10^k, k = the exponent of the lead's last digit; split so no step underflows early.
  let k = d.exponent + d.dropped
  let guess = <f64>d.lead
  if (k < -300) {
    guess *= Math.pow(10, k + 300)
    guess *= 1e-300
  } else guess *= Math.pow(10, k)
  let lo: u64 = 0
  let hi: u64 = INFINITY_BITS
  const g = reinterpret<u64>(guess)
  if (g >= 32 && g + 32 <= INFINITY_BITS && !roundsAtOrBelow(d, g - 32) && roundsAtOrBelow(d, g + 32)) {
    lo = g - 31
    hi = g + 32
  }
  while (lo < hi) {
    const mid = lo + ((hi - lo) >> 1)
    if (roundsAtOrBelow(d, mid)) hi = mid
    else lo = mid + 1
  }
  return reinterpret<f64>(lo)
}
