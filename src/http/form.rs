//! `application/x-www-form-urlencoded`, both ways: a query string or a form body read into
//! its pairs, and one value percent-encoded for a URL we write (the challenge's time-lock
//! link). Small on purpose: only what the reserved routes read and write.

/// Every byte but RFC 3986's unreserved characters, percent-encoded.
pub fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// One form-encoded value decoded: `+` is a space, `%XX` a byte; `None` when the bytes
/// are not UTF-8 or an escape is broken.
pub fn decode(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// The first value of `name` in a query string or form body, decoded.
pub fn field(form: &str, name: &str) -> Option<String> {
    form.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (decode(key).as_deref() == Some(name))
            .then(|| decode(value))
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_broken_escapes() {
        let text = "/shop?item=1&x=é y+z";
        assert_eq!(encode(text), "%2Fshop%3Fitem%3D1%26x%3D%C3%A9%20y%2Bz");
        assert_eq!(decode(&encode(text)).as_deref(), Some(text));
        assert_eq!(decode("a+b%20c").as_deref(), Some("a b c"));
        assert_eq!(decode("%zz"), None);
        assert_eq!(decode("%4"), None);
        assert_eq!(decode("%ff"), None, "not UTF-8");
    }

    #[test]
    fn finds_the_first_field_by_its_decoded_name() {
        let form = "challenge=c1.main&solution=42&solution=7&r=%2Fa%3Fb";
        assert_eq!(field(form, "solution").as_deref(), Some("42"));
        assert_eq!(field(form, "r").as_deref(), Some("/a?b"));
        assert_eq!(field(form, "missing"), None);
        assert_eq!(field("flag", "flag").as_deref(), Some(""));
    }
}
