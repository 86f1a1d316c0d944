//! What of an upstream's address may be shown: to clients (NotDelivered
//! details), to peers, and in logs at info level and above. RPC providers
//! put API keys in a URL's user information, path and query
//! (`https://mainnet.example/v3/KEY?key=Q`), and a child process's
//! arguments may hold tokens; none of it leaves this module. Shown is
//! `scheme://host:port` (the port only when the URL names one), and for a
//! child process only its program's file name.

use std::fmt;
use std::path::PathBuf;

use hyper::Uri;

/// An upstream URL as it may be shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicUrl(String);

impl PublicUrl {
    /// `scheme://host[:port]` of `url`; "the upstream" when it does not
    /// parse (nothing of an unparsable URL is shown).
    pub fn of(url: &str) -> Self {
        url.parse::<hyper::Uri>()
            .map_or_else(|_| Self("the upstream".to_owned()), |u| Self::of_uri(&u))
    }

    /// `scheme://host[:port]` of a parsed URI.
    pub fn of_uri(uri: &hyper::Uri) -> Self {
        if let Some(socket) = shown(uri) {
            return Self(socket);
        }
        let (Some(scheme), Some(host)) = (uri.scheme_str(), uri.host()) else {
            return Self("the upstream".to_owned());
        };
        Self(match uri.port_u16() {
            Some(port) => format!("{scheme}://{host}:{port}"),
            None => format!("{scheme}://{host}"),
        })
    }
}

impl fmt::Display for PublicUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A child process as it may be shown: its program's file name, never its
/// directory or arguments.
pub fn program(argv: &[String]) -> String {
    let Some(program) = argv.first() else {
        return "command (none)".to_owned();
    };
    let name = std::path::Path::new(program)
        .file_name()
        .map_or_else(|| program.clone(), |n| n.to_string_lossy().into_owned());
    format!("command {name}")
}

/// The scheme of an HTTP upstream on a Unix domain socket.
pub const UNIX_SCHEME: &str = "http+unix";

/// The socket path an `http+unix` URI names (its host: the path in hex).
pub fn socket_path(uri: &Uri) -> Option<PathBuf> {
    let bytes = hex::decode(uri.host()?).ok()?;
    String::from_utf8(bytes).ok().map(PathBuf::from)
}

/// `uri` as it may be shown: `http+unix:///run/app.sock` (a socket's path
/// is no secret, and the request path is left out as for any upstream).
pub fn shown(uri: &Uri) -> Option<String> {
    (uri.scheme_str() == Some(UNIX_SCHEME))
        .then(|| socket_path(uri).map(|p| format!("{UNIX_SCHEME}://{}", p.display())))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_in_a_url_are_never_shown() {
        for (url, shown) in [
            (
                "http://user:pass@rpc.example:8545/v3/KEY?key=Q",
                "http://rpc.example:8545",
            ),
            (
                "https://mainnet.example/v3/abcdef0123",
                "https://mainnet.example",
            ),
            ("wss://user@[::1]:8546/ws?token=T#frag", "wss://[::1]:8546"),
            ("ws://127.0.0.1:9/", "ws://127.0.0.1:9"),
            ("not a url with KEY", "the upstream"),
            ("/relative/KEY", "the upstream"),
        ] {
            let got = PublicUrl::of(url).to_string();
            assert_eq!(got, shown, "{url}");
            for secret in ["user", "pass", "KEY", "key=Q", "abcdef", "token", "frag"] {
                assert!(!got.contains(secret), "{url} shows {secret}: {got}");
            }
        }
    }

    #[test]
    fn a_child_is_shown_by_its_program_name_only() {
        let argv = [
            "/opt/tools/mcp-server".to_owned(),
            "--api-key=SECRET".to_owned(),
        ];
        assert_eq!(program(&argv), "command mcp-server");
        assert_eq!(program(&[]), "command (none)");
    }
}
