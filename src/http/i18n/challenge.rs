//! The challenge page's strings, in every language of [`super::Lang`]: what the page
//! shows while the browser does the proof of work at the door, and what its script says
//! as it goes.
//!
//! Kept apart from [`super::Catalog`] because only the challenge page needs them: the
//! page renders `checking` itself and hands the whole set to its script as
//! [`ChallengeText::script_json`] (the element's `data-strings`); the script carries no
//! text of its own. `{n}` is filled in by whoever shows the string.

use std::sync::OnceLock;

use serde::Serialize;

use super::Lang;

/// One language's challenge page.
#[derive(Debug, Serialize)]
pub struct ChallengeText {
    /// The page's heading and `<title>`.
    pub title: &'static str,
    /// The status line as the page is first shown, before the script starts.
    pub checking: &'static str,
    /// The status line while the work goes on; `{n}` is the percentage (0–99).
    pub progress: &'static str,
    /// The status line once solved, while the page takes the visitor's place.
    pub joining: &'static str,
    /// The status line when the answer was refused and a fresh challenge is being solved.
    pub retrying: &'static str,
    /// The status line when the page gave up (the script could not run, or every try was
    /// refused); the [`Self::reload`] link follows it.
    pub failed: &'static str,
    /// The link after [`Self::failed`]: loads the page again, with a new challenge.
    pub reload: &'static str,
    /// For a browser without JavaScript: the page goes on by itself; `{n}` is seconds.
    pub no_js: &'static str,
    /// For a browser whose script cannot do the work (no WebAssembly, no workers): the
    /// page waits out the time lock instead; `{n}` is seconds.
    pub slow: &'static str,
}

impl ChallengeText {
    /// This language's strings as JSON already escaped for an HTML attribute (single- or
    /// double-quoted; `"` is `&quot;`, `<`, `>`, `&` and `'` are JSON `\u` escapes), made
    /// once per language: the element's `data-strings`, to be written as it is (a safe
    /// string to the template engine, not escaped again).
    pub fn script_json(lang: Lang) -> &'static str {
        static JSON: OnceLock<Vec<String>> = OnceLock::new();
        let all = JSON.get_or_init(|| {
            Lang::ALL
                .iter()
                .map(|l| {
                    let json = serde_json::to_string(l.challenge())
                        .expect("the challenge strings serialize");
                    let mut out = String::with_capacity(json.len() + 32);
                    for c in json.chars() {
                        match c {
                            '<' => out.push_str("\\u003c"),
                            '>' => out.push_str("\\u003e"),
                            '&' => out.push_str("\\u0026"),
                            '\'' => out.push_str("\\u0027"),
                            '"' => out.push_str("&quot;"),
                            _ => out.push(c),
                        }
                    }
                    out
                })
                .collect()
        });
        let i = Lang::ALL
            .iter()
            .position(|l| *l == lang)
            .expect("every language is in Lang::ALL");
        &all[i]
    }
}

pub(super) static EN: ChallengeText = ChallengeText {
    title: "One moment",
    checking: "Checking your browser…",
    progress: "Checking your browser… {n} %",
    joining: "Done. Taking your place in line…",
    retrying: "That check didn't count. Trying again…",
    failed: "We couldn't check your browser.",
    reload: "Try again",
    no_js: "Without JavaScript this takes a little longer: the page goes on by itself in {n} seconds.",
    slow: "This browser can't do the quick check, so it takes a little longer: the page goes on by itself in {n} seconds.",
};

pub(super) static DE: ChallengeText = ChallengeText {
    title: "Einen Moment",
    checking: "Ihr Browser wird geprüft …",
    progress: "Ihr Browser wird geprüft … {n} %",
    joining: "Fertig. Ihr Platz in der Warteschlange wird vergeben …",
    retrying: "Diese Prüfung hat nicht gezählt. Neuer Versuch …",
    failed: "Ihr Browser konnte nicht geprüft werden.",
    reload: "Erneut versuchen",
    no_js: "Ohne JavaScript dauert es etwas länger: Die Seite geht in {n} Sekunden von selbst weiter.",
    slow: "Dieser Browser kann die schnelle Prüfung nicht ausführen, daher dauert es etwas länger: Die Seite geht in {n} Sekunden von selbst weiter.",
};

pub(super) static ES: ChallengeText = ChallengeText {
    title: "Un momento",
    checking: "Comprobando tu navegador…",
    progress: "Comprobando tu navegador… {n} %",
    joining: "Listo. Guardando tu lugar en la fila…",
    retrying: "Esa comprobación no sirvió. Intentándolo de nuevo…",
    failed: "No pudimos comprobar tu navegador.",
    reload: "Volver a intentarlo",
    no_js: "Sin JavaScript tarda un poco más: la página continuará sola en {n} segundos.",
    slow: "Este navegador no puede hacer la comprobación rápida, así que tarda un poco más: la página continuará sola en {n} segundos.",
};

pub(super) static FR: ChallengeText = ChallengeText {
    title: "Un instant",
    checking: "Vérification de votre navigateur…",
    progress: "Vérification de votre navigateur… {n} %",
    joining: "C'est fait. Nous vous plaçons dans la file…",
    retrying: "Cette vérification n'a pas compté. Nouvel essai…",
    failed: "Nous n'avons pas pu vérifier votre navigateur.",
    reload: "Réessayer",
    no_js: "Sans JavaScript, c'est un peu plus long : la page continuera d'elle-même dans {n} secondes.",
    slow: "Ce navigateur ne peut pas faire la vérification rapide, c'est donc un peu plus long : la page continuera d'elle-même dans {n} secondes.",
};

pub(super) static AR: ChallengeText = ChallengeText {
    title: "لحظة من فضلك",
    checking: "جارٍ التحقق من متصفحك…",
    progress: "جارٍ التحقق من متصفحك… {n}٪",
    joining: "تم. جارٍ حجز مكانك في الطابور…",
    retrying: "لم يُحتسب هذا التحقق. جارٍ المحاولة مجددًا…",
    failed: "تعذّر التحقق من متصفحك.",
    reload: "حاول مجددًا",
    no_js: "بدون JavaScript يستغرق الأمر وقتًا أطول قليلًا: ستتابع الصفحة تلقائيًا خلال {n} ثانية.",
    slow: "لا يستطيع هذا المتصفح إجراء التحقق السريع، لذا يستغرق الأمر وقتًا أطول قليلًا: ستتابع الصفحة تلقائيًا خلال {n} ثانية.",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_survive_translation_and_the_json_is_attribute_safe() {
        for lang in Lang::ALL {
            let c = lang.challenge();
            assert!(c.progress.contains("{n}"), "{lang:?}");
            assert!(c.no_js.contains("{n}"), "{lang:?}");
            assert!(c.slow.contains("{n}"), "{lang:?}");
            let json = ChallengeText::script_json(lang);
            assert!(!json.contains(['<', '>', '\'', '"'].as_ref()), "{json}");
            assert_eq!(json.matches('&').count(), json.matches("&quot;").count());
            let unescaped = json.replace("&quot;", "\"");
            let back: serde_json::Value = serde_json::from_str(&unescaped).unwrap();
            assert_eq!(back["failed"], c.failed);
        }
    }
}
