// The same stamp as murnode's: `mur --version` names the git revision too.
include!("../node/build.rs");
