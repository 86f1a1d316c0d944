//! `report.html` in a real browser (headless Chromium, Debian's
//! `chromium`): the page a run writes lays out its charts, and it fetches
//! nothing.

use std::path::Path;

const BIN: &str = env!("CARGO_BIN_EXE_npamp-loadgen");

/// Debian's `chromium`, or the browser `NPAMP_CHROMIUM` names.
fn chromium() -> Option<String> {
    std::env::var("NPAMP_CHROMIUM")
        .ok()
        .into_iter()
        .chain(["chromium", "chromium-browser", "google-chrome"].map(String::from))
        .find(|c| {
            std::process::Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

fn browse(browser: &str, page: &Path, what: &str) -> std::process::Output {
    std::process::Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--window-size=860,2200",
            what,
        ])
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs")
}

/// The page as the browser laid it out, and how many chart marks its
/// script counted with a size; no text of its charts runs past their
/// edges in the browser's own font (a title is wrapped, not clipped).
fn laid_out(browser: &str, page: &Path) -> (String, usize) {
    let dom = String::from_utf8_lossy(&browse(browser, page, "--dump-dom").stdout).into_owned();
    let drawn = dom
        .split("data-drawn=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "{}: the page's script did not run: {dom:.400}",
                page.display()
            )
        });
    let clipped = dom
        .split("data-clipped=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next());
    assert_eq!(clipped, Some(""), "{}: texts clipped", page.display());
    (dom, drawn)
}

#[test]
fn the_report_draws_in_a_browser() {
    let Some(browser) = chromium() else {
        eprintln!(
            "skipped: no chromium here (Debian's `chromium` package, or NPAMP_CHROMIUM=PATH)"
        );
        return;
    };
    let dir = std::env::temp_dir().join(format!("loadgen-html-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = std::process::Command::new(BIN)
        .args(["run", "--quiet", "--duration", "2s", "--out"])
        .arg(&dir)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios/quickstart.toml"))
        .output()
        .expect("run");
    // A run that failed its SLO on a loaded machine (exit 3) wrote its page
    // as well.
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let page = dir.join("report.html");
    let html = std::fs::read_to_string(&page).expect("report.html");
    for fetching in ["src=", "href=", "@import", "url("] {
        assert!(!html.contains(fetching), "the page fetches: {fetching}");
    }
    let (dom, drawn) = laid_out(&browser, &page);
    // Four charts: frames, the warm-up, lines of the spectrum, rates,
    // latency per second and outstanding.
    assert!(drawn >= 12, "{drawn} marks laid out");
    assert!(dom.contains("<h2>Stages</h2>") && dom.contains("<h2>Rates</h2>"));
    // `compare --out`: the run against itself twice, the three overlaid, in
    // the browser.
    let cmp = dir.join("compare");
    let out = std::process::Command::new(BIN)
        .arg("compare")
        .args([&dir, &dir, &dir])
        .arg("--out")
        .arg(&cmp)
        .output()
        .expect("compare");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cmp_page = cmp.join("compare.html");
    let (dom, drawn) = laid_out(&browser, &cmp_page);
    // Three charts: frames, legend boxes and three lines each at least.
    assert!(drawn >= 12, "{drawn} marks laid out in the comparison");
    assert!(dom.contains("p99 each second"), "{dom:.400}");
    assert!(dom.contains("2: "), "the third run is labelled: {dom:.400}");
    // A screenshot, for the results run that asks for one.
    if let Ok(shot) = std::env::var("NPAMP_REPORT_SCREENSHOT") {
        let taken = browse(&browser, &page, &format!("--screenshot={shot}"));
        assert!(taken.status.success());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
