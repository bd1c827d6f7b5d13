// The version every binary reports (--version, psctl nodes): the project's version and the git
// commit it was built from ("0.1.0 (git 1a2b3c4d5e)"; "-dirty" when the tree had changes).
#ifndef PS_COMMON_VERSION_H_
#define PS_COMMON_VERSION_H_

namespace ps {

const char* VersionString();

}  // namespace ps

#endif  // PS_COMMON_VERSION_H_
