// LingeringHandler: the mark of a connection handler that is evrdma's own and keeps working while
// the Reactor lingers (a byte stream's: it finishes sending what its program wrote). Every other
// handler is the application's, and a lingering Reactor calls nothing of the application's: the
// connection swaps it for a silent one (ConnectionCore::beforeLinger).
#pragma once

#include "evrdma/Callbacks.h"

namespace evrdma::detail {

class LingeringHandler : public ConnectionHandler {};

}  // namespace evrdma::detail
