//! The proof of work's strings, in every language of [`super::Lang`]: the challenge page
//! (its heading, body, the live region's status, the no-JavaScript note), what its script
//! shows when the check keeps failing, and the refusals of an answer.
//!
//! Kept apart from [`super::Catalog`] for the same reason as the error pages: the waiting
//! page's data blob never needs them. The challenge page hands its script the ones it
//! shows as JSON ([`ChallengeText::script_json`], the element's `data-strings`); the
//! script carries no text of its own.

use std::sync::OnceLock;

use serde::Serialize;

use super::Lang;

/// One language's challenge strings.
#[derive(Debug, Serialize)]
pub struct ChallengeText {
    /// The challenge page's heading (and `<title>`).
    pub title: &'static str,
    /// What the page says it is doing and why, under the heading.
    pub detail: &'static str,
    /// The live region's first status while the work runs.
    pub checking: &'static str,
    /// The no-JavaScript note; `{n}` is the seconds until the page goes on by itself.
    pub no_js: &'static str,
    /// The status line while the work goes on; `{n}` is the percentage (0–99).
    pub progress: &'static str,
    /// The status line once solved, while the page takes the visitor's place.
    pub joining: &'static str,
    /// The status line when the answer was refused and a fresh challenge is being solved.
    pub retrying: &'static str,
    /// For a browser whose script cannot do the work (no WebAssembly, no workers): the
    /// page waits out the time lock instead; `{n}` is seconds.
    pub slow: &'static str,
    /// What the script shows once the check failed three times.
    pub failed: &'static str,
    /// The link that reloads the page after that.
    pub reload: &'static str,
    /// Heading of a refused answer (expired, replayed, another client's, forged).
    pub refused_title: &'static str,
    /// Body of a refused answer.
    pub refused_detail: &'static str,
    /// Heading of an answer sent from another site's page.
    pub cross_site_title: &'static str,
    /// Body of an answer sent from another site's page.
    pub cross_site_detail: &'static str,
}

impl ChallengeText {
    /// The no-JavaScript note for `secs` seconds.
    pub fn no_js_in(&self, secs: u64) -> String {
        self.no_js.replace("{n}", &secs.to_string())
    }
}

/// What the challenge page's script shows, in one language: the part of
/// [`ChallengeText`] that goes into `data-strings`.
#[derive(Serialize)]
struct ScriptStrings {
    progress: &'static str,
    joining: &'static str,
    retrying: &'static str,
    slow: &'static str,
    failed: &'static str,
    reload: &'static str,
}

impl ChallengeText {
    /// The strings the page's script shows, in `lang`, as JSON already escaped for an HTML
    /// attribute (single- or double-quoted; `"` is `&quot;`, `<`, `>`, `&` and `'` are JSON
    /// `\u` escapes), made once per language: the element's `data-strings`, to be written
    /// as it is (a safe string to the template engine, not escaped again).
    pub fn script_json(lang: Lang) -> &'static str {
        static JSON: OnceLock<Vec<String>> = OnceLock::new();
        let all = JSON.get_or_init(|| {
            Lang::ALL
                .iter()
                .map(|l| {
                    let c = l.challenge();
                    let json = serde_json::to_string(&ScriptStrings {
                        progress: c.progress,
                        joining: c.joining,
                        retrying: c.retrying,
                        slow: c.slow,
                        failed: c.failed,
                        reload: c.reload,
                    })
                    .expect("the challenge strings serialize");
                    let mut out = String::with_capacity(json.len() + 32);
                    for ch in json.chars() {
                        match ch {
                            '<' => out.push_str("\\u003c"),
                            '>' => out.push_str("\\u003e"),
                            '&' => out.push_str("\\u0026"),
                            '\'' => out.push_str("\\u0027"),
                            '"' => out.push_str("&quot;"),
                            _ => out.push(ch),
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
    title: "One moment…",
    detail: "Before you join the line, your browser does a short check. It takes a second or two and needs nothing from you.",
    checking: "Checking your browser…",
    no_js: "Without JavaScript, this page goes on by itself in {n} seconds.",
    progress: "Checking your browser… {n} %",
    joining: "Done. Taking your place in line…",
    retrying: "That check didn't count. Trying again…",
    slow: "This browser can't do the quick check, so it takes a little longer: the page goes on by itself in {n} seconds.",
    failed: "The check did not succeed.",
    reload: "Reload the page",
    refused_title: "This check is no longer valid",
    refused_detail: "It has expired, was already used, or came from another connection. Reload the page to start again.",
    cross_site_title: "Not from this site",
    cross_site_detail: "This request came from another site's page and was not accepted.",
};

pub(super) static DE: ChallengeText = ChallengeText {
    title: "Einen Moment…",
    detail: "Bevor Sie sich anstellen, führt Ihr Browser eine kurze Prüfung durch. Sie dauert ein bis zwei Sekunden, und Sie müssen nichts tun.",
    checking: "Ihr Browser wird geprüft…",
    no_js: "Ohne JavaScript geht diese Seite in {n} Sekunden von selbst weiter.",
    progress: "Ihr Browser wird geprüft… {n} %",
    joining: "Fertig. Ihr Platz in der Warteschlange wird vergeben …",
    retrying: "Diese Prüfung hat nicht gezählt. Neuer Versuch …",
    slow: "Dieser Browser kann die schnelle Prüfung nicht ausführen, daher dauert es etwas länger: Die Seite geht in {n} Sekunden von selbst weiter.",
    failed: "Die Prüfung ist nicht gelungen.",
    reload: "Seite neu laden",
    refused_title: "Diese Prüfung ist nicht mehr gültig",
    refused_detail: "Sie ist abgelaufen, wurde schon verwendet oder kam von einer anderen Verbindung. Laden Sie die Seite neu, um neu zu beginnen.",
    cross_site_title: "Nicht von dieser Website",
    cross_site_detail: "Diese Anfrage kam von der Seite einer anderen Website und wurde nicht angenommen.",
};

pub(super) static ES: ChallengeText = ChallengeText {
    title: "Un momento…",
    detail: "Antes de entrar en la fila, tu navegador hace una breve comprobación. Tarda uno o dos segundos y no tienes que hacer nada.",
    checking: "Comprobando tu navegador…",
    no_js: "Sin JavaScript, esta página continuará sola en {n} segundos.",
    progress: "Comprobando tu navegador… {n} %",
    joining: "Listo. Guardando tu lugar en la fila…",
    retrying: "Esa comprobación no sirvió. Intentándolo de nuevo…",
    slow: "Este navegador no puede hacer la comprobación rápida, así que tarda un poco más: la página continuará sola en {n} segundos.",
    failed: "La comprobación no ha funcionado.",
    reload: "Recargar la página",
    refused_title: "Esta comprobación ya no es válida",
    refused_detail: "Ha caducado, ya se usó o procede de otra conexión. Recarga la página para empezar de nuevo.",
    cross_site_title: "No procede de este sitio",
    cross_site_detail: "Esta solicitud vino de la página de otro sitio y no se aceptó.",
};

pub(super) static FR: ChallengeText = ChallengeText {
    title: "Un instant…",
    detail: "Avant de rejoindre la file, votre navigateur effectue une courte vérification. Elle prend une ou deux secondes et ne vous demande rien.",
    checking: "Vérification de votre navigateur…",
    no_js: "Sans JavaScript, cette page continuera d'elle-même dans {n} secondes.",
    progress: "Vérification de votre navigateur… {n} %",
    joining: "C'est fait. Nous vous plaçons dans la file…",
    retrying: "Cette vérification n'a pas compté. Nouvel essai…",
    slow: "Ce navigateur ne peut pas faire la vérification rapide, c'est donc un peu plus long : la page continuera d'elle-même dans {n} secondes.",
    failed: "La vérification n'a pas abouti.",
    reload: "Recharger la page",
    refused_title: "Cette vérification n'est plus valable",
    refused_detail: "Elle a expiré, a déjà servi ou provient d'une autre connexion. Rechargez la page pour recommencer.",
    cross_site_title: "Pas depuis ce site",
    cross_site_detail: "Cette requête venait de la page d'un autre site et n'a pas été acceptée.",
};

pub(super) static AR: ChallengeText = ChallengeText {
    title: "لحظة من فضلك…",
    detail: "قبل أن تنضم إلى قائمة الانتظار، يجري متصفحك فحصًا قصيرًا. يستغرق ثانية أو ثانيتين ولا يتطلب منك شيئًا.",
    checking: "جارٍ التحقق من متصفحك…",
    no_js: "من دون JavaScript، ستتابع هذه الصفحة تلقائيًا خلال {n} ثانية.",
    progress: "جارٍ التحقق من متصفحك… {n}٪",
    joining: "تم. جارٍ حجز مكانك في الطابور…",
    retrying: "لم يُحتسب هذا التحقق. جارٍ المحاولة مجددًا…",
    slow: "لا يستطيع هذا المتصفح إجراء التحقق السريع، لذا يستغرق الأمر وقتًا أطول قليلًا: ستتابع الصفحة تلقائيًا خلال {n} ثانية.",
    failed: "لم ينجح الفحص.",
    reload: "أعد تحميل الصفحة",
    refused_title: "لم يعد هذا الفحص صالحًا",
    refused_detail: "انتهت صلاحيته أو استُخدم من قبل أو جاء من اتصال آخر. أعد تحميل الصفحة للبدء من جديد.",
    cross_site_title: "ليس من هذا الموقع",
    cross_site_detail: "جاء هذا الطلب من صفحة موقع آخر ولم يُقبل.",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_survive_translation_and_the_json_is_attribute_safe() {
        for lang in Lang::ALL {
            let c = lang.challenge();
            assert!(c.progress.contains("{n}"), "{lang:?}");
            assert!(c.slow.contains("{n}"), "{lang:?}");
            let json = ChallengeText::script_json(lang);
            assert!(!json.contains(['<', '>', '\'', '"'].as_ref()), "{json}");
            assert_eq!(json.matches('&').count(), json.matches("&quot;").count());
            let back: serde_json::Value =
                serde_json::from_str(&json.replace("&quot;", "\"")).unwrap();
            assert_eq!(back["failed"], c.failed);
            assert_eq!(back["progress"], c.progress);
            assert!(
                back.get("refused_title").is_none(),
                "only what the script shows"
            );
        }
    }
}
