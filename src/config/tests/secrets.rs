//! Secrets from files (`<key>_file`, `ANTEROOM_<KEY>_FILE`), `admin_tokens` and the Redis
//! credentials.

use super::*;

fn secret_file(content: &str) -> tempfile::NamedTempFile {
    write_file(content)
}

#[test]
fn a_key_file_is_read_with_its_trailing_newline_trimmed() {
    let token = secret_file("file-admin-token-0123\n");
    let text = format!(
        "cookie_secret: \"{SECRET}\"\nadmin_token_file: \"{}\"\nrooms:\n  main:\n    origin: http://127.0.0.1:3000\n",
        token.path().display()
    );
    let c = parse(&text).unwrap();
    assert_eq!(c.admin_token.as_str(), "file-admin-token-0123");
}

#[test]
fn both_forms_or_an_unreadable_file_are_errors_naming_the_key() {
    let token = secret_file("file-admin-token-0123");
    let both = format!(
        "{}admin_token_file: \"{}\"\n",
        minimal(""),
        token.path().display()
    );
    let e = err(&both);
    assert!(
        e.contains("admin_token_file") && e.contains("not both"),
        "{e}"
    );

    let missing = format!(
        "cookie_secret: \"{SECRET}\"\nadmin_token_file: /nonexistent/anteroom-token\nrooms:\n  main:\n    origin: http://127.0.0.1:3000\n"
    );
    let e = err(&missing);
    assert!(
        e.contains("anteroom.yaml:2: admin_token_file: cannot read /nonexistent/anteroom-token"),
        "{e}"
    );
}

#[test]
fn the_environment_file_form_overrides_the_file_and_refuses_both() {
    let f = file_with_rate("10", "127.0.0.1:1000");
    let token = secret_file("env-file-admin-token-0123\r\n");
    let path = token.path().display().to_string();
    let with_file = Overrides {
        config: Some(f.path().to_path_buf()),
        ..Overrides::default()
    };
    let env = env_map(&[("ANTEROOM_ADMIN_TOKEN_FILE", &path)]);
    let c = load(&with_file, &env).unwrap().config;
    assert_eq!(c.admin_token.as_str(), "env-file-admin-token-0123");

    let env = env_map(&[
        ("ANTEROOM_ADMIN_TOKEN_FILE", &path),
        ("ANTEROOM_ADMIN_TOKEN", "env-admin-token-0123"),
    ]);
    let e = load(&with_file, &env).unwrap_err();
    assert_eq!(e.key(), Some("ANTEROOM_ADMIN_TOKEN_FILE"));

    let env = env_map(&[("ANTEROOM_COOKIE_SECRET_FILE", "/nonexistent/cookie")]);
    let e = load(&with_file, &env).unwrap_err().to_string();
    assert!(e.contains("ANTEROOM_COOKIE_SECRET_FILE"), "{e}");
}

#[test]
fn named_tokens_parse_and_their_errors_name_the_item() {
    let viewer = secret_file("viewer-token-0123456789\n");
    let text = format!(
        "{}admin_tokens:\n  - name: dash\n    token_file: \"{}\"\n    role: viewer\n  - {{name: ops, token: operator-token-0123456, role: operator}}\n",
        minimal(""),
        viewer.path().display()
    );
    let c = parse(&text).unwrap();
    assert_eq!(c.admin_tokens.len(), 2);
    assert_eq!(c.admin_tokens[0].name, "dash");
    assert_eq!(c.admin_tokens[0].token.as_str(), "viewer-token-0123456789");
    assert_eq!(c.admin_tokens[0].role, Role::Viewer);
    assert_eq!(c.admin_tokens[1].role, Role::Operator);
    assert!(
        c.describe()
            .contains("admin tokens:     admin (admin), dash (viewer), ops (operator)")
    );

    let item = |body: &str| err(&format!("{}admin_tokens:\n  - {body}\n", minimal("")));
    let e = item("{name: admin, token: operator-token-0123456, role: admin}");
    assert!(e.contains("admin_tokens[0].name"), "{e}");
    let e = item("{name: ops, token: operator-token-0123456, role: root}");
    assert!(
        e.contains("admin_tokens[0].role") && e.contains("root"),
        "{e}"
    );
    let e = item(&format!("{{name: ops, token: {TOKEN}, role: viewer}}"));
    assert!(
        e.contains("admin_tokens[0].token") && e.contains("differ"),
        "{e}"
    );
    let e = item("{name: ops, token: short, role: viewer}");
    assert!(e.contains("admin_tokens[0].token"), "{e}");
    let e = item("{name: ops, role: viewer}");
    assert!(e.contains("token_file"), "{e}");
}

#[test]
fn the_redis_password_is_apart_from_the_url_and_encoded_into_it_to_connect() {
    let text = format!(
        "redis:\n  url: redis://127.0.0.1:6379/0\n  username: app\n  password: \"p@ss:w/rd\"\n{}",
        minimal("")
    );
    let c = parse(&text).unwrap();
    assert_eq!(c.redis.url, "redis://127.0.0.1:6379/0");
    assert_eq!(
        c.redis.connect_urls(),
        ["redis://app:p%40ss%3Aw%2Frd@127.0.0.1:6379/0"]
    );
    let described = c.describe();
    assert!(
        !described.contains("p@ss") && !described.contains("p%40ss"),
        "{described}"
    );
    assert!(!format!("{c:?}").contains("p@ss"));

    let both = format!(
        "redis:\n  url: redis://:inline@127.0.0.1:6379/0\n  password: other\n{}",
        minimal("")
    );
    assert!(err(&both).contains("redis.password"));
    let user_only = format!(
        "redis:\n  url: redis://127.0.0.1:6379/0\n  username: app\n{}",
        minimal("")
    );
    assert!(err(&user_only).contains("redis.username"));
    let embedded = format!("redis:\n  password: secret\n{}", minimal(""));
    assert!(err(&embedded).contains("redis.url is empty"));
}
