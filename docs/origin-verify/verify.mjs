// Verifying X-Anteroom-Admission at the origin with Node's built-in crypto (Node >= 16).
// Fetch the key once from GET /__anteroom/admission-key ("public_key_pem") and keep it.
//
//   ANTEROOM_PUBLIC_KEY_PEM="$(cat key.pem)" ROOM="drop" TOKEN="v1...." node verify.mjs
// prints the claims as JSON and exits 0, or prints why and exits 1 (2 without ROOM).
//
// ROOM is the room this origin serves, as named in anteroom.yaml. One admission key signs
// every room's tokens, so the signature alone says "admitted somewhere", not "admitted
// here": an origin must also check the token's `room` claim.
import { createPublicKey, verify } from "node:crypto";

const publicKey = createPublicKey(process.env.ANTEROOM_PUBLIC_KEY_PEM);

// Returns the claims {kid, room, ref, admitted_at, exp}, or null if the token is not
// genuine, has expired, or was minted for another room than `room`. `room` is required:
// the room this origin serves. Without the check, a visitor admitted to a quiet room could
// carry their token to a busy one behind the same key.
export function verifyAdmission(token, room, now = Math.floor(Date.now() / 1000)) {
  if (typeof room !== "string" || room === "") {
    // A programming error, not a bad token: never fall back to "any room".
    throw new TypeError("verifyAdmission: room must be the non-empty name of this origin's room");
  }
  const parts = (token || "").split(".");
  if (parts.length !== 3 || parts[0] !== "v1") return null;
  const signed = Buffer.from(`${parts[0]}.${parts[1]}`, "ascii");
  const signature = Buffer.from(parts[2], "base64url");
  // Ed25519: the algorithm argument is null.
  if (signature.length !== 64 || !verify(null, signed, publicKey, signature)) return null;
  let claims;
  try {
    claims = JSON.parse(Buffer.from(parts[1], "base64url").toString("utf8"));
  } catch {
    return null;
  }
  if (claims === null || typeof claims !== "object") return null;
  if (!(Number.isInteger(claims.exp) && now < claims.exp)) return null; // expired
  if (claims.room !== room) return null; // genuine, but admitted to another room
  return claims;
}

// In an Express-style handler of the origin behind room "drop":
//   const claims = verifyAdmission(req.get("x-anteroom-admission"), "drop");
//   if (!claims) return res.status(403).send("please come in through the queue");
const room = process.env.ROOM;
if (!room) {
  console.error("usage: ROOM=<this origin's room> TOKEN=v1.... node verify.mjs");
  process.exit(2);
}
const claims = verifyAdmission(process.env.TOKEN, room);
if (claims) {
  console.log(JSON.stringify(claims));
} else {
  console.error(`refused: not a valid, unexpired admission token for room ${JSON.stringify(room)}`);
  process.exit(1);
}
