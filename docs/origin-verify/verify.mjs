// Verifying X-Anteroom-Admission at the origin with Node's built-in crypto (Node >= 16).
// Fetch the key once from GET /__anteroom/admission-key ("public_key_pem") and keep it.
//
//   ANTEROOM_PUBLIC_KEY_PEM="$(cat key.pem)" TOKEN="v1...." node verify.mjs
// prints the claims as JSON and exits 0, or prints why and exits 1.
import { createPublicKey, verify } from "node:crypto";

const publicKey = createPublicKey(process.env.ANTEROOM_PUBLIC_KEY_PEM);

// Returns the claims {kid, room, ref, admitted_at, exp} or null if the token is not genuine.
export function verifyAdmission(token, now = Math.floor(Date.now() / 1000)) {
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
  if (!(Number.isInteger(claims.exp) && now < claims.exp)) return null; // expired
  return claims;
}

// In an Express-style handler:
//   const claims = verifyAdmission(req.get("x-anteroom-admission"));
//   if (!claims) return res.status(403).send("please come in through the queue");
const claims = verifyAdmission(process.env.TOKEN);
if (claims) {
  console.log(JSON.stringify(claims));
} else {
  console.error("refused: not a valid, unexpired admission token");
  process.exit(1);
}
