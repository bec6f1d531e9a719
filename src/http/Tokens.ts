/**
 * Bearer tokens as the gate and the routes read them: the token of an `Authorization` header, and
 * its digest, so that tokens of any length compare in constant time.
 */
import * as crypto from "node:crypto"

/** SHA-256 of a token, so tokens of any length compare in constant time. */
export const digest = (s: string) => crypto.createHash("sha256").update(s).digest()

/** The token of an `Authorization: Bearer <token>` header; the scheme is case-insensitive (RFC 7235). */
export const bearerToken = (header: string | undefined) => {
  const m = /^bearer +(\S+) *$/i.exec(header ?? "")
  return m ? m[1]! : ""
}

/** What a host route answers a caller without the host's own token. */
export const HOST_TOKEN_NEEDED = "this route needs the host's own token: `Authorization: Bearer <host token>`"
